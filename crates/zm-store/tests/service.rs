//! The tool service's policies, on every backend: read tools write nothing
//! (every table compared, the audit log aside), a read-only token creates
//! no row, a write and its audit row commit together — and a refused
//! write leaves nothing half-written — and every call is counted; a read
//! the client cancels stops unanswered, a write it cancels still lands.
//!
//! These tests compare whole databases, so each runs on a store of its
//! own: a fresh SQLite file, and on PostgreSQL a fresh schema of the test
//! database (`ZM_TEST_DATABASE_URL`), which other tests never touch.

mod common;

use common::{PASSWORD, unique};
use serde_json::{Value, json};
use zm_contracts::{ErrorCode, ToolName};
use zm_store::{Caller, Fingerprint, OpenOptions, Store, ToolService, Transport};

/// A store nobody else writes to: a fresh SQLite file.
async fn isolated_sqlite() -> Store {
    let dir = tempfile::Builder::new()
        .prefix("service-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary directory");
    let store = Store::open(&zm_store::sqlite_url(&dir.path().join("zm.db")))
        .await
        .expect("open SQLite");
    // The directory must outlive the store's connections.
    std::mem::forget(dir);
    store
}

/// A store nobody else writes to on PostgreSQL: a fresh schema of the
/// test database. `None` (the test is skipped) without one.
async fn isolated_postgres(test: &str) -> Option<Store> {
    let Some(url) = zm_store::test_database_url() else {
        eprintln!("{} is not set: skipped {test}", common::PG_ENV);
        return None;
    };
    let schema = unique("zm_iso_");
    sqlx::any::install_default_drivers();
    let admin = sqlx::AnyPool::connect(url.trim())
        .await
        .expect("connect to PostgreSQL");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await
        .expect("create a schema");
    admin.close().await;
    let sep = if url.contains('?') { '&' } else { '?' };
    let mut opts = OpenOptions::new(format!(
        "{}{sep}options=-c%20search_path%3D{schema}",
        url.trim()
    ));
    opts.max_connections = 2;
    Some(
        Store::open_with(opts)
            .await
            .expect("open PostgreSQL on a fresh schema"),
    )
}

/// One test per backend over an isolated store: `<name>_sqlite`, and
/// `<name>_postgres` (skipped without `ZM_TEST_DATABASE_URL`).
macro_rules! isolated_tests {
    ($($body:ident => $sqlite:ident, $postgres:ident;)*) => {$(
        #[tokio::test]
        async fn $sqlite() {
            $body(isolated_sqlite().await, "sqlite").await;
        }
        #[tokio::test]
        async fn $postgres() {
            if let Some(store) = isolated_postgres(stringify!($postgres)).await {
                $body(store, "postgres").await;
            }
        }
    )*};
}

isolated_tests! {
    read_tools_write_nothing_and_a_read_only_token_creates_no_row
        => read_tools_write_nothing_sqlite, read_tools_write_nothing_postgres;
    a_write_and_its_audit_row_commit_together
        => write_and_audit_commit_together_sqlite, write_and_audit_commit_together_postgres;
    a_cancelled_read_stops_and_a_cancelled_write_lands
        => cancelled_calls_sqlite, cancelled_calls_postgres;
}

async fn call(tools: &ToolService, caller: &Caller, tool: ToolName, args: Value) -> Value {
    match tools.call(caller, tool, &args).await {
        Ok(out) => out.to_json(),
        Err(e) => panic!("{tool} {args}: {e}"),
    }
}

/// A user with memories, a rule, a conflict and entities: something for
/// every read tool to find.
async fn populated(tools: &ToolService) -> Caller {
    let user = tools
        .store()
        .create_user(
            &format!("{}@test.zero-memory.invalid", unique("svc-")),
            PASSWORD,
        )
        .await
        .expect("a user");
    let caller = Caller::new(user.id);
    let a = call(
        tools,
        &caller,
        ToolName::Remember,
        json!({"content": "The billing service stores invoices in PostgreSQL.", "kind": "decision",
               "project_hint": "https://github.com/acme/billing.git", "entities": [{"name": "billing"}]}),
    )
    .await;
    let b = call(
        tools,
        &caller,
        ToolName::Remember,
        json!({"content": "The billing service stores invoices in MongoDB.", "scope": "core"}),
    )
    .await;
    call(
        tools,
        &caller,
        ToolName::Link,
        json!({"src": a["memory_id"], "dst": b["memory_id"], "type": "contradicts"}),
    )
    .await;
    let c = call(
        tools,
        &caller,
        ToolName::Remember,
        json!({"content": "Always write migrations for both backends.", "kind": "convention", "scope": "personal"}),
    )
    .await;
    call(
        tools,
        &caller,
        ToolName::PromoteRule,
        json!({"memory_id": c["memory_id"]}),
    )
    .await;
    caller
}

/// Every read tool, with project hints nobody used yet, threads and
/// conversation ids: everything that once created rows.
fn read_calls() -> Vec<(ToolName, Value)> {
    vec![
        (
            ToolName::Recall,
            json!({"query": "billing invoices", "project_hint": "/src/never-seen-before"}),
        ),
        (
            ToolName::Recall,
            json!({"query": "billing", "project_hint": "https://github.com/acme/billing"}),
        ),
        (
            ToolName::BuildContext,
            json!({"topic": "billing", "briefing": true, "project_hint": "/src/another-new-one"}),
        ),
        (
            ToolName::BuildContext,
            json!({"topic": "billing", "briefing": true, "project_hint": "/src/third", "conversation_id": "conv-1"}),
        ),
        (ToolName::Entities, json!({})),
        (ToolName::ListConflicts, json!({})),
        (ToolName::ExportMemories, json!({})),
    ]
}

async fn fingerprint(store: &Store, label: &str) -> Fingerprint {
    store
        .fingerprint()
        .await
        .unwrap_or_else(|e| panic!("[{label}] fingerprint: {e}"))
}

async fn read_tools_write_nothing_and_a_read_only_token_creates_no_row(store: Store, label: &str) {
    {
        let tools = ToolService::new(store.clone());
        let owner = populated(&tools).await;
        let conflicts = call(&tools, &owner, ToolName::ListConflicts, json!({})).await;
        let dispute = conflicts["conflicts"][0]["dispute_id"].clone();
        assert!(dispute.is_string(), "[{label}] the fixture has a conflict");

        // A read-only personal access token, as the HTTP layer sees it.
        let (_, secret) = store
            .create_token(&owner.user_id, Some("ro"), &[zm_store::SCOPE_READ])
            .await
            .expect("a read-only token");
        let auth = store
            .authenticate(&secret)
            .await
            .expect("authenticate")
            .expect("a valid token");
        let read_only = Caller {
            session_id: Some("ses_readonly".into()),
            ..Caller::authenticated(&auth, Transport::Rest)
        };

        let before = fingerprint(&store, label).await;
        for caller in [&owner, &read_only] {
            let mut thread = None;
            for (tool, args) in read_calls() {
                let out = call(&tools, caller, tool, args).await;
                if let Some(t) = out["session"]["thread"].as_str() {
                    thread = Some(t.to_string());
                }
            }
            // A pinned briefing issued a thread; echoing it writes nothing either.
            let thread = thread.unwrap_or_else(|| panic!("[{label}] a briefing issued a thread"));
            call(
                &tools,
                caller,
                ToolName::Recall,
                json!({"query": "billing", "thread": thread}),
            )
            .await;
            call(
                &tools,
                caller,
                ToolName::BuildContext,
                json!({"topic": "billing", "thread": thread}),
            )
            .await;
            call(
                &tools,
                caller,
                ToolName::GetConflict,
                json!({"dispute_id": dispute}),
            )
            .await;
        }
        let after_reads = fingerprint(&store, label).await;
        assert_eq!(
            before.changed_tables(&after_reads),
            Vec::<(String, usize, usize)>::new(),
            "[{label}] read tools changed rows"
        );

        // A project a read named but nobody wrote to stays unrecorded: it
        // resolves, and a read of it finds nothing in it.
        let pinned = call(
            &tools,
            &owner,
            ToolName::Recall,
            json!({"query": "billing", "project_hint": "/src/never-seen-before"}),
        )
        .await;
        let project = pinned["project_scope"].as_str().unwrap_or_default();
        assert!(
            project.ends_with(".never_seen_before"),
            "[{label}] the hint resolves: {pinned}"
        );
        assert!(
            pinned["memories"]
                .as_array()
                .is_some_and(|m| m.iter().all(|h| h["scope"] != project)),
            "[{label}] nothing lives in an unrecorded project"
        );

        // Every write tool refuses the read-only token and writes nothing.
        for tool in ToolName::ALL
            .iter()
            .filter(|t| t.access() != zm_contracts::Access::Read)
        {
            let e = tools
                .call(&read_only, *tool, &json!({}))
                .await
                .expect_err("a read-only token cannot write");
            assert_eq!(e.code, ErrorCode::Forbidden, "[{label}] {tool}: {e}");
            assert!(e.message.contains("mcp:write"), "[{label}] {tool}: {e}");
        }
        let after_refusals = fingerprint(&store, label).await;
        assert_eq!(
            after_reads.changed_tables(&after_refusals),
            Vec::<(String, usize, usize)>::new(),
            "[{label}] refused writes changed rows"
        );
        let m = tools.metrics();
        assert_eq!(
            m.count(
                ToolName::Remember,
                Transport::Rest,
                Some(ErrorCode::Forbidden)
            ),
            1,
            "[{label}] the refusal is counted"
        );
        assert!(
            m.count(ToolName::Recall, Transport::Rest, None) >= 3,
            "[{label}] reads are counted by transport"
        );
        store.close().await;
    }
}

/// …and a refused write leaves nothing half-written.
async fn a_write_and_its_audit_row_commit_together(store: Store, label: &str) {
    {
        let tools = ToolService::new(store.clone());
        let caller = populated(&tools).await;
        let audited = |rows: &[Value]| {
            rows.iter()
                .map(|r| {
                    format!(
                        "{} {}",
                        r["command"].as_str().unwrap_or("?"),
                        r["outcome"].as_str().unwrap_or("?")
                    )
                })
                .collect::<Vec<_>>()
        };
        let rows = store.audit_rows(&caller.user_id, 100).await.unwrap();
        assert_eq!(
            audited(&rows).len(),
            6,
            "[{label}] one audit row per write, the account's creation first: {:?}",
            audited(&rows)
        );

        // This remember names a project nobody wrote to (it would create the
        // scope and bind the hint) and links a memory that does not exist:
        // refused after routing, so the transaction must roll back whole.
        let before = fingerprint(&store, label).await;
        let e = tools
            .call(
                &caller,
                ToolName::Remember,
                &json!({"content": "Payments retry three times.", "project_hint": "/src/payments",
                        "links": [{"dst": "mem_0000000000000000.0000000000", "type": "relates_to"}]}),
            )
            .await
            .expect_err("a link to a missing memory is refused");
        assert_eq!(e.code, ErrorCode::NotFound, "[{label}] {e}");
        let after = fingerprint(&store, label).await;
        assert_eq!(
            before.changed_tables(&after),
            Vec::<(String, usize, usize)>::new(),
            "[{label}] a refused write left rows behind"
        );
        let rows = store.audit_rows(&caller.user_id, 1).await.unwrap();
        assert_eq!(
            audited(&rows),
            vec!["remember error"],
            "[{label}] the refusal is audited"
        );

        // The same write without the bad link creates the project, the
        // binding, the memory and the audit row at once.
        let ok = call(
            &tools,
            &caller,
            ToolName::Remember,
            json!({"content": "Payments retry three times.", "project_hint": "/src/payments"}),
        )
        .await;
        assert!(
            ok["scope"]
                .as_str()
                .is_some_and(|s| s.ends_with(".payments")),
            "[{label}] {ok}"
        );
        let changed: Vec<String> = after
            .changed_tables(&fingerprint(&store, label).await)
            .into_iter()
            .map(|(t, _, _)| t)
            .collect();
        for table in ["memories", "scopes", "scope_members", "project_bindings"] {
            assert!(
                changed.iter().any(|t| t == table),
                "[{label}] the write touched {table}: {changed:?}"
            );
        }
        let rows = store.audit_rows(&caller.user_id, 1).await.unwrap();
        assert_eq!(audited(&rows), vec!["remember ok"], "[{label}]");
        store.close().await;
    }
}

/// A client's cancellation (MCP `notifications/cancelled`) stops a read
/// and not a write: the read answers nothing and is counted as cancelled,
/// not as a call; the write is applied and audited as if nothing had
/// been said. A cancellation that never comes changes nothing.
async fn a_cancelled_read_stops_and_a_cancelled_write_lands(store: Store, label: &str) {
    {
        let tools = ToolService::new(store.clone());
        let caller = populated(&tools).await;
        let recall = json!({"query": "billing invoices"});
        let before = fingerprint(&store, label).await;

        let stopped = tools
            .call_unless_cancelled(&caller, ToolName::Recall, &recall, std::future::ready(()))
            .await;
        assert!(
            stopped.is_none(),
            "[{label}] a cancelled read answers nothing: {stopped:?}"
        );
        let m = tools.metrics();
        assert_eq!(
            m.cancelled(ToolName::Recall, caller.transport),
            1,
            "[{label}]"
        );
        assert_eq!(
            m.count(ToolName::Recall, caller.transport, None),
            0,
            "[{label}] not counted as a call"
        );
        assert_eq!(
            before.changed_tables(&fingerprint(&store, label).await),
            Vec::<(String, usize, usize)>::new(),
            "[{label}] a cancelled read wrote nothing"
        );

        let answered = tools
            .call_unless_cancelled(&caller, ToolName::Recall, &recall, std::future::pending())
            .await
            .expect("no cancellation: an answer")
            .expect("the recall succeeds")
            .to_json();
        assert!(
            answered["memories"]
                .as_array()
                .is_some_and(|m| !m.is_empty()),
            "[{label}] an uncancelled read answers: {answered}"
        );

        let remembered = tools
            .call_unless_cancelled(
                &caller,
                ToolName::Remember,
                &json!({"content": "Cancelled or not, the nightly export runs at three.", "kind": "fact", "scope": "personal"}),
                std::future::ready(()),
            )
            .await
            .expect("a write answers whatever the client does")
            .expect("the remember succeeds")
            .to_json();
        let id = remembered["memory_id"]
            .as_str()
            .expect("a memory id")
            .to_owned();
        let found = call(
            &tools,
            &caller,
            ToolName::Recall,
            json!({"query": "nightly export"}),
        )
        .await;
        assert!(
            found["memories"]
                .as_array()
                .is_some_and(|m| m.iter().any(|h| h["id"] == id.as_str())),
            "[{label}] the cancelled write landed: {found}"
        );
        let audit = store.audit_rows(&caller.user_id, 20).await.unwrap();
        assert_eq!(
            audit.len(),
            7,
            "[{label}] the account and five writes in the fixture, this one: {audit:?}"
        );
        assert!(
            audit[0]["command"] == "remember" && audit[0]["outcome"] == "ok",
            "[{label}] the cancelled write was audited: {audit:?}"
        );
        assert_eq!(
            m.cancelled(ToolName::Remember, caller.transport),
            0,
            "[{label}]"
        );
        assert_eq!(
            m.count(ToolName::Remember, caller.transport, None),
            4,
            "[{label}] three in the fixture, this one"
        );

        // Writes run on tasks of their own, at most so many at once: with
        // the limit full, an MCP write is `rate_limited` and writes
        // nothing; once the others end, it is taken again.
        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
        let mut held = Vec::new();
        while let Some(task) = {
            let gate = gate.clone();
            store.spawn_write(async move {
                let _pass = gate.acquire().await;
            })
        } {
            held.push(task);
        }
        assert_eq!(
            held.len(),
            zm_store::store::WRITES_IN_FLIGHT_MAX,
            "[{label}]"
        );
        let write = json!({"content": "The limit of writes in flight is a thousand and twenty-four.", "kind": "fact", "scope": "personal"});
        let before = fingerprint(&store, label).await;
        let refused = tools
            .call_unless_cancelled(&caller, ToolName::Remember, &write, std::future::pending())
            .await
            .expect("a write answers");
        assert_eq!(
            refused.map(|_| ()).unwrap_err().code,
            ErrorCode::RateLimited,
            "[{label}] past the limit"
        );
        assert_eq!(
            before.changed_tables(&fingerprint(&store, label).await),
            Vec::<(String, usize, usize)>::new(),
            "[{label}] a refused write wrote nothing"
        );
        gate.add_permits(held.len());
        for task in held {
            task.await.unwrap();
        }
        tools
            .call_unless_cancelled(&caller, ToolName::Remember, &write, std::future::pending())
            .await
            .expect("a write answers")
            .expect("taken once there is room");
        store.close().await;
    }
}
