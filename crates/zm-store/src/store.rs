//! The store handle and the caller context.

use std::sync::Arc;

use sqlx::{Any, AnyPool, Transaction};
use zm_contracts::ToolError;

use crate::clock::Clock;
use crate::db::{self, Backend, DbResult, OpenError, OpenOptions};
use crate::threads::ThreadKey;

/// What the caller's credentials allow: every token reads; writing needs
/// the `mcp:write` scope; erasing the account (`delete_account`) also needs
/// the `account:delete` scope, which no token carries unless asked for. The
/// tool service checks it against each tool's declared access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Grant {
    /// `mcp:read` only.
    #[default]
    ReadOnly,
    /// `mcp:read` and `mcp:write` (ordinary tokens): every tool but
    /// `delete_account`.
    ReadWrite,
    /// `mcp:read`, `mcp:write` and `account:delete` (local accounts over
    /// stdio and the CLI, tokens created with `--allow-account-delete`).
    Full,
}

impl Grant {
    /// May the caller write?
    pub fn can_write(self) -> bool {
        matches!(self, Grant::ReadWrite | Grant::Full)
    }
    /// May the caller erase its account?
    pub fn can_delete_account(self) -> bool {
        self == Grant::Full
    }
}

/// The surface a call arrived on (a metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// MCP, over stdio or Streamable HTTP.
    Mcp,
    /// The REST mirror.
    Rest,
    /// The command line (`zero-memory import`).
    Cli,
    /// The web dashboard, for a signed-in person.
    Dashboard,
    /// In-process callers: tests, benchmarks, checks.
    #[default]
    Internal,
}

impl Transport {
    pub const ALL: &'static [Transport] = &[
        Transport::Mcp,
        Transport::Rest,
        Transport::Cli,
        Transport::Dashboard,
        Transport::Internal,
    ];
    pub const fn as_str(self) -> &'static str {
        match self {
            Transport::Mcp => "mcp",
            Transport::Rest => "rest",
            Transport::Cli => "cli",
            Transport::Dashboard => "dashboard",
            Transport::Internal => "internal",
        }
    }
}

/// A request's id (`req_…`), as the HTTP layer adopted or minted it: a
/// typed request extension every layer reads, instead of the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

impl RequestId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Who is calling. Always built from authentication and the transport,
/// never from tool input.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The authenticated user (`usr_…`).
    pub user_id: String,
    /// What the credentials allow.
    pub grant: Grant,
    /// The surface the call arrived on.
    pub transport: Transport,
    /// The MCP client's name (`clientInfo.name`), when known.
    pub agent_name: Option<String>,
    /// The transport session id (`ses_…`), when the transport has sessions.
    pub session_id: Option<String>,
    /// The project scope this connection is attached to, if any.
    pub attached_project: Option<String>,
    /// The thread token this connection last received, if any: used when
    /// a call does not echo one.
    pub thread: Option<String>,
    /// The request id, for the audit log.
    pub request_id: Option<String>,
}

/// The longest agent name kept, in characters.
pub const AGENT_NAME_MAX: usize = 100;

/// An agent name as a transport reports it (MCP `clientInfo.name`, REST's
/// `X-ZM-Agent`), made fit to store: control characters dropped (U+0000
/// would fail on PostgreSQL), trimmed, at most [`AGENT_NAME_MAX`]
/// characters; `None` when nothing is left. Every transport goes through
/// it: the name lands on every memory and audit row, and no quota counts it.
pub fn agent_name(raw: Option<&str>) -> Option<String> {
    let clean: String = raw?
        .chars()
        .filter(|c| !c.is_control())
        .take(AGENT_NAME_MAX)
        .collect();
    let clean = clean.trim();
    (!clean.is_empty()).then(|| clean.to_string())
}

impl Caller {
    /// Who writes what this caller writes: a person signed in to the
    /// dashboard (an edit, a pin) is `human`; every other surface speaks
    /// for an agent.
    pub fn author_kind(&self) -> zm_contracts::AuthorKind {
        match self.transport {
            Transport::Dashboard => zm_contracts::AuthorKind::Human,
            _ => zm_contracts::AuthorKind::Agent,
        }
    }

    /// A local account with full access (stdio, the CLI, tests), account
    /// deletion included.
    pub fn new(user_id: impl Into<String>) -> Self {
        Caller {
            user_id: user_id.into(),
            grant: Grant::Full,
            ..Default::default()
        }
    }
    /// The caller an authenticated token speaks for, on `transport`.
    pub fn authenticated(auth: &crate::Authenticated, transport: Transport) -> Self {
        Caller {
            user_id: auth.user_id.clone(),
            grant: auth.grant(),
            transport,
            ..Default::default()
        }
    }
    pub fn personal_scope(&self) -> String {
        zm_contracts::scope::personal_scope(&self.user_id)
    }
    pub fn core_scope(&self) -> String {
        zm_contracts::scope::core_scope(&self.user_id)
    }
}

/// The store: a connection pool, the backend it speaks and a clock.
#[derive(Clone)]
pub struct Store {
    pub(crate) pool: AnyPool,
    pub(crate) backend: Backend,
    pub(crate) clock: Arc<Clock>,
    pub(crate) thread_key: ThreadKey,
    pub(crate) form_key: Arc<[u8; 32]>,
    pub(crate) limits: crate::Limits,
    /// Recall hits not written yet (shared by every clone).
    pub(crate) usage: Arc<crate::usage::UsageBuffer>,
    /// The embedding model and the vector index (shared by every clone).
    pub(crate) semantic: Arc<crate::semantic::Semantic>,
    /// PostgreSQL's planner statistics, kept here when autovacuum is off.
    pub(crate) statistics: Arc<crate::statistics::Statistics>,
    /// Writes running on tasks of their own (a REST write whose client
    /// hung up): [`Store::close`] waits for them.
    writes: tokio_util::task::TaskTracker,
    /// Refused writes' audit rows waiting for SQLite's writer turn
    /// (`Store::audit`): apart from `writes`, so that they never take a
    /// write's place, and waited for on close like them.
    pub(crate) audits: tokio_util::task::TaskTracker,
    /// Writes [`Store::spawn_write`] refused, at its cap (`/metrics`).
    writes_refused: Arc<std::sync::atomic::AtomicU64>,
    /// Password checks running at once: each holds about 19 MiB (argon2's
    /// memory cost) on a blocking thread, so sign-ins under many emails
    /// at once (no account's back-off counts them) would otherwise take
    /// the process's memory; one per core, the others wait their turn.
    pub(crate) password_checks: Arc<tokio::sync::Semaphore>,
    /// The writers' turns, taken in this process before a write
    /// transaction takes a pooled connection, so that writers wait here
    /// rather than on the database's locks with a connection each, which
    /// left reads without one behind a long write. SQLite: one (its one
    /// writer at a time). PostgreSQL: all the pool's connections but
    /// those kept for reads ([`write_turns`]): writes waiting on a row or
    /// an advisory lock (one user's import and their agents' writes at
    /// once) no longer take every connection, leaving every user's reads
    /// to time out.
    pub(crate) writer_turn: Arc<tokio::sync::Semaphore>,
    /// On PostgreSQL, each user's tool writes take turns in this process
    /// before they take a writer's turn ([`Store::write_tx_of`]): one
    /// user's writes queued on their owner's lock (an import and their
    /// agents' writes at once) wait here holding nothing, instead of
    /// holding every writer's turn while other users' writes wait.
    owner_turns:
        Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Semaphore>>>>,
}

/// How many users' turn queues [`Store::write_tx_of`] keeps before it drops
/// those nobody holds or waits for.
const OWNER_TURNS_KEPT: usize = 1024;

/// How many write transactions may hold a pooled connection at once: on
/// SQLite one; on PostgreSQL the pool's size less a quarter of it (at
/// least one) kept for reads, so `--database-connections 8` lets six
/// writes run while two connections stay for reads. A pool of one
/// connection has one turn (reads then wait behind writes, as before).
pub(crate) fn write_turns(backend: Backend, max_connections: u32) -> usize {
    match backend {
        Backend::Sqlite => 1,
        Backend::Postgres => {
            let n = max_connections.max(1) as usize;
            if n == 1 { 1 } else { n - (n / 4).max(1) }
        }
    }
}

/// How long a write waits for SQLite's writer turn before it gives up,
/// as the database's busy timeout would have.
const WRITER_TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A write transaction; on SQLite it holds this process's writer turn
/// until it ends.
pub(crate) struct WriteTx {
    tx: Transaction<'static, Any>,
    _turn: tokio::sync::OwnedSemaphorePermit,
    /// Its user's turn (PostgreSQL tool writes), let go after the
    /// writer's turn.
    _owner: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl WriteTx {
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }
    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        self.tx.rollback().await
    }
}

impl std::ops::Deref for WriteTx {
    type Target = sqlx::AnyConnection;
    fn deref(&self) -> &sqlx::AnyConnection {
        &self.tx
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut sqlx::AnyConnection {
        &mut self.tx
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .finish()
    }
}

impl Store {
    /// Open (creating a SQLite file if needed) and migrate.
    pub async fn open(url: &str) -> Result<Store, OpenError> {
        Self::open_with(OpenOptions::new(url)).await
    }

    pub async fn open_with(opts: OpenOptions) -> Result<Store, OpenError> {
        let (pool, backend) = db::connect(&opts).await?;
        let clock = Arc::new(Clock::default());
        db::migrate(&pool, backend, &clock, opts.migrate).await?;
        let thread_key = db::thread_key(&pool, &clock).await?;
        let form_key = Arc::new(db::form_key(&pool, &clock).await?);
        let statistics = Arc::new(crate::statistics::Statistics::default());
        let opened_at = clock.now_ms();
        if backend == Backend::Postgres {
            statistics.start(&pool).await;
        }
        Ok(Store {
            pool,
            backend,
            clock,
            thread_key,
            form_key,
            limits: opts.limits,
            usage: Arc::default(),
            semantic: Arc::new(crate::semantic::Semantic::opened_at(opened_at)),
            statistics,
            writes: tokio_util::task::TaskTracker::new(),
            audits: tokio_util::task::TaskTracker::new(),
            writes_refused: Arc::default(),
            password_checks: Arc::new(tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 8)),
            )),
            writer_turn: Arc::new(tokio::sync::Semaphore::new(write_turns(
                backend,
                opts.max_connections,
            ))),
            owner_turns: Arc::default(),
        })
    }

    /// Run `write` to its end on a task of its own, whatever becomes of
    /// whoever waits for it; [`Store::close`] waits for it first. `None`
    /// (nothing started) while [`WRITES_IN_FLIGHT_MAX`] such writes are
    /// still running: a client that sends writes and hangs up at once
    /// cannot pile up unbounded work behind the connection limit.
    pub fn spawn_write<F>(&self, write: F) -> Option<tokio::task::JoinHandle<F::Output>>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        // The task logs under its caller's span (a request's id), as the
        // caller would.
        let write = tracing::Instrument::in_current_span(write);
        let spawned = (self.writes.len() < WRITES_IN_FLIGHT_MAX).then(|| self.writes.spawn(write));
        if spawned.is_none() {
            self.writes_refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        spawned
    }

    /// How many writes [`Store::spawn_write`] refused since this process
    /// started (each answered `rate_limited`).
    pub fn writes_refused(&self) -> u64 {
        self.writes_refused
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A read-only transaction whose reads all see one snapshot: SQLite's
    /// read transaction holds its WAL snapshot from the first read;
    /// PostgreSQL's from the first statement under REPEATABLE READ.
    pub(crate) async fn read_snapshot(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        match self.backend {
            Backend::Sqlite => self.pool.begin().await,
            Backend::Postgres => {
                self.pool
                    .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    .await
            }
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The key of the OAuth sign-in form's CSRF token: stored in
    /// `server_secrets`, the same for every process on this database.
    pub fn form_key(&self) -> &[u8; 32] {
        &self.form_key
    }

    /// The store's clock (tests advance it).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// A write transaction (`BEGIN IMMEDIATE` on SQLite so writers queue on
    /// the busy timeout instead of failing on lock upgrade). On PostgreSQL
    /// READ COMMITTED whatever the server's or role's default: the writes
    /// rely on it (a row lock or an `ON CONFLICT` wait, then a read that
    /// sees what the other transaction committed); under REPEATABLE READ
    /// or SERIALIZABLE they would fail with serialization errors instead.
    pub(crate) async fn write_tx(&self) -> Result<WriteTx, ToolError> {
        self.write_tx_of(None).await
    }

    /// [`Store::write_tx`] for a tool call of `owner`: on PostgreSQL it
    /// first takes that user's turn in this process (see `owner_turns`),
    /// waited for at most 30 s like the writer's turn. SQLite's writes
    /// take turns already.
    pub(crate) async fn write_tx_of(&self, owner: Option<&str>) -> Result<WriteTx, ToolError> {
        let owner_turn = match owner {
            Some(owner) if self.backend == Backend::Postgres => {
                let queue = {
                    let mut turns = self
                        .owner_turns
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if turns.len() >= OWNER_TURNS_KEPT {
                        turns.retain(|_, q| Arc::strong_count(q) > 1);
                    }
                    Arc::clone(
                        turns
                            .entry(owner.to_string())
                            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(1))),
                    )
                };
                let turn = tokio::time::timeout(WRITER_TURN_WAIT, queue.acquire_owned())
                    .await
                    .map_err(|_| {
                        tracing::warn!(target: "zm_store", "a write waited 30 s for its user's other writes");
                        ToolError::rate_limited(
                            "Your other writes are still running; nothing was written. Retry shortly.",
                        )
                    })?
                    .map_err(|e| crate::db::internal("owner turn", e))?;
                Some(turn)
            }
            _ => None,
        };
        let turn = tokio::time::timeout(
            WRITER_TURN_WAIT,
            Arc::clone(&self.writer_turn).acquire_owned(),
        )
        .await
        .map_err(|_| {
            // Load, not a fault: the caller may send it again.
            tracing::warn!(target: "zm_store", "a write waited 30 s for a writer's turn");
            ToolError::rate_limited(
                "The database is busy with other writes; nothing was written. Retry shortly.",
            )
        })?
        .map_err(|e| crate::db::internal("writer turn", e))?;
        let begin = match self.backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN ISOLATION LEVEL READ COMMITTED",
        };
        let tx = self.pool.begin_with(begin).await.db("begin transaction")?;
        Ok(WriteTx {
            tx,
            _turn: turn,
            _owner: owner_turn,
        })
    }

    /// Run a best-effort bookkeeping write (a token's last use, a
    /// session's last sighting): never waited for on SQLite while another
    /// write of this store holds the writer's turn, so that requests do
    /// not each hold a pooled connection on the busy timeout behind a long
    /// write (a batch), leaving none to reads. Skipped then; a failure is
    /// logged. (A write by another process on the file is still waited
    /// for, on the busy timeout.) Whether it ran.
    pub(crate) async fn note<'q>(
        &self,
        what: &'static str,
        query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    ) -> bool {
        let _turn = match self.backend {
            Backend::Sqlite => match Arc::clone(&self.writer_turn).try_acquire_owned() {
                Ok(turn) => Some(turn),
                Err(_) => return false,
            },
            Backend::Postgres => None,
        };
        match query.execute(&self.pool).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(target: "zm_store", error = %e, what, "a bookkeeping write failed");
                false
            }
        }
    }

    /// Refresh PostgreSQL's planner statistics (`ANALYZE`) after a bulk
    /// load; autovacuum does this on its own on a normally configured
    /// server. A no-op on SQLite, whose queries pin their join order.
    pub async fn refresh_statistics(&self) -> Result<(), ToolError> {
        if self.backend == Backend::Postgres {
            sqlx::query("ANALYZE")
                .execute(&self.pool)
                .await
                .db("analyze")?;
        }
        Ok(())
    }

    /// Is the database reachable?
    pub async fn ping(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.pool).await.is_ok()
    }

    /// Close the pool (waits for connections to be returned).
    ///
    /// Waits at most ten seconds for connections still in use (a query
    /// stuck on a dead network never returns its own): a process shutting
    /// down then exits rather than waiting for its supervisor's kill. An
    /// unfinished transaction is rolled back by the database, as at a
    /// crash.
    pub async fn close(&self) {
        const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
        // The writes still running end first (they need the pool).
        self.writes.close();
        if tokio::time::timeout(CLOSE_WAIT, self.writes.wait())
            .await
            .is_err()
        {
            tracing::warn!(target: "zm_store", running = self.writes.len(), "closing the database anyway: writes still running after 10 s");
        }
        self.audits.close();
        if tokio::time::timeout(CLOSE_WAIT, self.audits.wait())
            .await
            .is_err()
        {
            tracing::warn!(target: "zm_store", waiting = self.audits.len(), "closing the database anyway: refusals' audit rows still waiting after 10 s");
        }
        if tokio::time::timeout(CLOSE_WAIT, self.pool.close())
            .await
            .is_err()
        {
            tracing::warn!(target: "zm_store", busy = self.pool.size(), "closing the database anyway: connections still in use after 10 s");
        }
    }

    /// Is the database structurally sound? SQLite runs `PRAGMA
    /// integrity_check` (true when it reports exactly `ok`) and the
    /// full-text index checked against `memories`; PostgreSQL,
    /// which has no equivalent, answers whether `SELECT 1` succeeds.
    pub async fn integrity_check(&self) -> Result<bool, ToolError> {
        match self.backend {
            Backend::Sqlite => {
                let rows: Vec<String> = sqlx::query_scalar("PRAGMA integrity_check")
                    .fetch_all(&self.pool)
                    .await
                    .db("integrity check")?;
                if rows.len() != 1 || rows[0] != "ok" {
                    tracing::error!(target: "zm_store", problems = ?rows, "integrity check failed");
                    return Ok(false);
                }
                // The full-text index against `memories`, its words and its
                // owner and scope tokens (rank 1: the external content is
                // read too; without it only the index's own structure is).
                if let Err(e) = sqlx::query(
                    "INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)",
                )
                .execute(&self.pool)
                .await
                {
                    tracing::error!(target: "zm_store", error = %e, "the full-text index does not match memories");
                    return Ok(false);
                }
                Ok(true)
            }
            Backend::Postgres => {
                let one: i32 = sqlx::query_scalar("SELECT 1")
                    .fetch_one(&self.pool)
                    .await
                    .db("integrity check")?;
                Ok(one == 1)
            }
        }
    }

    /// The database's size in bytes: PostgreSQL `pg_database_size` of the
    /// current database; SQLite `page_count × page_size` of the main file
    /// (the write-ahead log is not included: measure `<file>-wal` for it).
    pub async fn database_size_bytes(&self) -> Result<Option<i64>, ToolError> {
        let sql = match self.backend {
            Backend::Sqlite => {
                "SELECT p.page_count * s.page_size FROM pragma_page_count() p, pragma_page_size() s"
            }
            Backend::Postgres => "SELECT pg_database_size(current_database())",
        };
        let size: Option<i64> = sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .db("database size")?;
        Ok(size)
    }
}

/// The most writes [`Store::spawn_write`] keeps running at once.
pub const WRITES_IN_FLIGHT_MAX: usize = 1024;

#[cfg(test)]
mod writer_turn_tests {
    use serde_json::json;
    use sqlx::Connection as _;
    use zm_contracts::ToolName;

    use super::{Backend, write_turns};

    /// SQLite has one writer; PostgreSQL's writes keep a quarter of the
    /// pool (at least one connection) for reads.
    #[test]
    fn writes_leave_reads_a_quarter_of_the_pool() {
        for (pool, turns) in [(1, 1), (2, 1), (4, 3), (8, 6), (40, 30), (1000, 750)] {
            assert_eq!(write_turns(Backend::Postgres, pool), turns, "pool {pool}");
            assert_eq!(write_turns(Backend::Sqlite, pool), 1, "pool {pool}");
        }
    }

    /// While another process holds SQLite's write lock, writers of this
    /// one wait for their turn without a pooled connection each: a read
    /// still gets one and answers (it waited behind them for the pool's
    /// 30 s, then failed, when each waiting writer held a connection).
    #[tokio::test]
    async fn waiting_writers_leave_connections_for_reads() {
        let (dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "turns").await;
        let tools = crate::ToolService::new(store.clone());
        let url = crate::sqlite_url(&dir.path().join("zm.db"));
        let mut other = sqlx::AnyConnection::connect(&url).await.unwrap();
        sqlx::raw_sql("BEGIN IMMEDIATE")
            .execute(&mut other)
            .await
            .unwrap();
        let started = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let writers: Vec<_> = (0..12)
            .map(|i| {
                let (tools, caller, started) = (tools.clone(), caller.clone(), started.clone());
                tokio::spawn(async move {
                    started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tools
                        .call(
                            &caller,
                            ToolName::Remember,
                            &json!({"content": format!("Writer {i} waited for its turn."), "kind": "fact", "scope": "personal"}),
                        )
                        .await
                })
            })
            .collect();
        // Every writer has started and one holds the turn (waiting on the
        // other process's lock); a moment more lets the rest queue (set-up
        // only: nothing is timed, and the read must answer either way).
        while started.load(std::sync::atomic::Ordering::SeqCst) < 12
            || store.writer_turn.available_permits() > 0
        {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let read = tools
            .call(&caller, ToolName::Recall, &json!({"query": "turn"}))
            .await;
        assert!(read.is_ok(), "a read answers while writers wait: {read:?}");
        sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
        for w in writers {
            w.await
                .unwrap()
                .expect("each writer lands once the lock is free");
        }
    }

    /// A write refused while another holds the writer's turn is answered
    /// at once (it holds no connection waiting for the turn, and the
    /// holder may be its own caller); its audit row lands once the turn
    /// is free.
    #[tokio::test]
    async fn a_refusal_behind_a_held_turn_is_audited_once_it_is_free() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "refused-turn").await;
        let tools = crate::ToolService::new(store.clone());
        let held = std::sync::Arc::clone(&store.writer_turn)
            .acquire_owned()
            .await
            .unwrap();
        let refused = tokio::time::timeout(
            std::time::Duration::from_secs(120),
            tools.call(&caller, ToolName::Remember, &json!({"kind": "fact"})),
        )
        .await
        .expect("answered while the turn is held (a hang guard, not a timing)");
        assert!(refused.is_err(), "{refused:?}");
        let rows = |store: crate::Store, user: String| async move {
            let rows = store.audit_rows(&user, 10).await.unwrap();
            rows.iter().filter(|r| r["command"] == "remember").count()
        };
        assert_eq!(
            rows(store.clone(), caller.user_id.clone()).await,
            0,
            "not while the turn is held"
        );
        drop(held);
        let mut seen = 0;
        for _ in 0..10_000 {
            seen = rows(store.clone(), caller.user_id.clone()).await;
            if seen > 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(seen, 1, "the refusal's audit row, once the turn is free");
    }
}

#[cfg(test)]
mod write_tests {
    /// Writes past the limit are refused while the others run, and taken
    /// again once they end; close waits for those running.
    #[tokio::test]
    async fn writes_in_flight_are_bounded_and_closing_waits_for_them() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        // Closed until the test opens it, whenever a task starts waiting.
        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut running = Vec::new();
        for _ in 0..super::WRITES_IN_FLIGHT_MAX {
            let (gate, done) = (gate.clone(), done.clone());
            running.push(
                store
                    .spawn_write(async move {
                        let _pass = gate.acquire().await.expect("the gate stays");
                        done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    })
                    .expect("under the limit"),
            );
        }
        assert_eq!(store.writes_refused(), 0);
        assert!(store.spawn_write(async {}).is_none(), "one past the limit");
        assert_eq!(store.writes_refused(), 1, "counted for /metrics");
        gate.add_permits(super::WRITES_IN_FLIGHT_MAX);
        for r in running {
            r.await.unwrap();
        }
        assert_eq!(
            done.load(std::sync::atomic::Ordering::SeqCst),
            super::WRITES_IN_FLIGHT_MAX
        );
        let last = store.spawn_write(async { 7 }).expect("room again");
        store.close().await;
        assert_eq!(last.await.unwrap(), 7, "close waited for it");
    }
}

#[cfg(test)]
mod agent_name_tests {
    #[test]
    fn agent_names_are_bounded_and_clean() {
        assert_eq!(
            super::agent_name(Some(" claude-code ")),
            Some("claude-code".into())
        );
        assert_eq!(super::agent_name(Some("a\u{0}b\nc")), Some("abc".into()));
        assert_eq!(
            super::agent_name(Some(&"x".repeat(5000))).map(|s| s.chars().count()),
            Some(100)
        );
        assert_eq!(super::agent_name(Some("\u{0}  ")), None);
        assert_eq!(super::agent_name(None), None);
    }
}
