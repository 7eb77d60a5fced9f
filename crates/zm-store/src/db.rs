//! Opening a database, migrations, and the helpers every query uses.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};
use zm_contracts::ToolError;

use crate::clock::Clock;

/// Which database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// The suffix of a `SELECT` that holds the rows it reads until the
    /// transaction ends (`FOR NO KEY UPDATE` on PostgreSQL: the rows stay
    /// readable and referenceable, not changeable by another writer);
    /// nothing on SQLite, whose write transactions take turns already.
    pub(crate) fn hold_rows(self) -> &'static str {
        match self {
            Backend::Sqlite => "",
            Backend::Postgres => " FOR NO KEY UPDATE",
        }
    }

    /// A text expression to order by code point on both backends: SQLite
    /// compares text bytewise, PostgreSQL by the database's collation
    /// (`en_US.UTF-8` ignores case and `-` at first, so lists came out in
    /// another order there, and another set past a `LIMIT`).
    pub(crate) fn bytewise(self, expr: &str) -> String {
        match self {
            Backend::Sqlite => expr.to_string(),
            Backend::Postgres => format!("{expr} COLLATE \"C\""),
        }
    }
}

/// A migration: its number, name and SQL per backend.
struct Migration {
    version: i64,
    name: &'static str,
    sqlite: &'static str,
    postgres: &'static str,
    /// What SQL cannot do, run after it in the same transaction.
    data: Option<DataStep>,
}

/// A migration's step in Rust: rewriting stored values by rules only Rust
/// code knows.
#[derive(Debug, Clone, Copy)]
enum DataStep {
    /// Entity match keys recomputed by today's [`crate::memories::match_key`],
    /// merging entities whose keys now agree.
    RekeyEntities,
}

static MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sqlite: include_str!("../../../migrations/sqlite/0001_initial.sql"),
        postgres: include_str!("../../../migrations/postgres/0001_initial.sql"),
        data: None,
    },
    Migration {
        version: 2,
        name: "oauth",
        sqlite: include_str!("../../../migrations/sqlite/0002_oauth.sql"),
        postgres: include_str!("../../../migrations/postgres/0002_oauth.sql"),
        data: None,
    },
    Migration {
        version: 3,
        name: "signed_threads",
        sqlite: include_str!("../../../migrations/sqlite/0003_signed_threads.sql"),
        postgres: include_str!("../../../migrations/postgres/0003_signed_threads.sql"),
        data: None,
    },
    Migration {
        version: 4,
        name: "user_disabled",
        sqlite: include_str!("../../../migrations/sqlite/0004_user_disabled.sql"),
        postgres: include_str!("../../../migrations/postgres/0004_user_disabled.sql"),
        data: None,
    },
    Migration {
        version: 5,
        name: "storage_usage",
        sqlite: include_str!("../../../migrations/sqlite/0005_storage_usage.sql"),
        postgres: include_str!("../../../migrations/postgres/0005_storage_usage.sql"),
        data: None,
    },
    Migration {
        version: 6,
        name: "shared_state",
        sqlite: include_str!("../../../migrations/sqlite/0006_shared_state.sql"),
        postgres: include_str!("../../../migrations/postgres/0006_shared_state.sql"),
        data: None,
    },
    Migration {
        version: 7,
        name: "rank_index",
        sqlite: include_str!("../../../migrations/sqlite/0007_rank_index.sql"),
        postgres: include_str!("../../../migrations/postgres/0007_rank_index.sql"),
        data: None,
    },
    Migration {
        version: 8,
        name: "teams",
        sqlite: include_str!("../../../migrations/sqlite/0008_teams.sql"),
        postgres: include_str!("../../../migrations/postgres/0008_teams.sql"),
        data: None,
    },
    Migration {
        version: 9,
        name: "web_sessions",
        sqlite: include_str!("../../../migrations/sqlite/0009_web_sessions.sql"),
        postgres: include_str!("../../../migrations/postgres/0009_web_sessions.sql"),
        data: None,
    },
    Migration {
        version: 10,
        name: "memory_usage",
        sqlite: include_str!("../../../migrations/sqlite/0010_memory_usage.sql"),
        postgres: include_str!("../../../migrations/postgres/0010_memory_usage.sql"),
        data: None,
    },
    Migration {
        version: 11,
        name: "recall_activity",
        sqlite: include_str!("../../../migrations/sqlite/0011_recall_activity.sql"),
        postgres: include_str!("../../../migrations/postgres/0011_recall_activity.sql"),
        data: None,
    },
    Migration {
        version: 12,
        name: "memory_vectors",
        sqlite: include_str!("../../../migrations/sqlite/0012_memory_vectors.sql"),
        postgres: include_str!("../../../migrations/postgres/0012_memory_vectors.sql"),
        data: None,
    },
    Migration {
        version: 13,
        name: "conflict_pairs",
        sqlite: include_str!("../../../migrations/sqlite/0013_conflict_pairs.sql"),
        postgres: include_str!("../../../migrations/postgres/0013_conflict_pairs.sql"),
        data: None,
    },
    Migration {
        version: 14,
        name: "imported_memories",
        sqlite: include_str!("../../../migrations/sqlite/0014_imported_memories.sql"),
        postgres: include_str!("../../../migrations/postgres/0014_imported_memories.sql"),
        data: None,
    },
    Migration {
        version: 15,
        name: "entity_keys_normalised",
        sqlite: include_str!("../../../migrations/sqlite/0015_entity_keys_normalised.sql"),
        postgres: include_str!("../../../migrations/postgres/0015_entity_keys_normalised.sql"),
        data: Some(DataStep::RekeyEntities),
    },
    Migration {
        version: 16,
        name: "rules_by_scope",
        sqlite: include_str!("../../../migrations/sqlite/0016_rules_by_scope.sql"),
        postgres: include_str!("../../../migrations/postgres/0016_rules_by_scope.sql"),
        data: None,
    },
    Migration {
        version: 17,
        name: "team_event_order",
        sqlite: include_str!("../../../migrations/sqlite/0017_team_event_order.sql"),
        postgres: include_str!("../../../migrations/postgres/0017_team_event_order.sql"),
        data: None,
    },
    Migration {
        version: 18,
        name: "shared_by_scope",
        sqlite: include_str!("../../../migrations/sqlite/0018_shared_by_scope.sql"),
        postgres: include_str!("../../../migrations/postgres/0018_shared_by_scope.sql"),
        data: None,
    },
    Migration {
        version: 19,
        name: "fts_tenant",
        sqlite: include_str!("../../../migrations/sqlite/0019_fts_tenant.sql"),
        postgres: include_str!("../../../migrations/postgres/0019_fts_tenant.sql"),
        data: None,
    },
    Migration {
        version: 20,
        name: "embedding_claims",
        sqlite: include_str!("../../../migrations/sqlite/0020_embedding_claims.sql"),
        postgres: include_str!("../../../migrations/postgres/0020_embedding_claims.sql"),
        data: None,
    },
    Migration {
        version: 21,
        name: "memory_deletions",
        sqlite: include_str!("../../../migrations/sqlite/0021_memory_deletions.sql"),
        postgres: include_str!("../../../migrations/postgres/0021_memory_deletions.sql"),
        data: None,
    },
    Migration {
        version: 22,
        name: "fts_word_parts",
        sqlite: include_str!("../../../migrations/sqlite/0022_fts_word_parts.sql"),
        postgres: include_str!("../../../migrations/postgres/0022_fts_word_parts.sql"),
        data: None,
    },
    Migration {
        version: 23,
        name: "edge_lookups",
        sqlite: include_str!("../../../migrations/sqlite/0023_edge_lookups.sql"),
        postgres: include_str!("../../../migrations/postgres/0023_edge_lookups.sql"),
        data: None,
    },
    Migration {
        version: 24,
        name: "recalls_per_user",
        sqlite: include_str!("../../../migrations/sqlite/0024_recalls_per_user.sql"),
        postgres: include_str!("../../../migrations/postgres/0024_recalls_per_user.sql"),
        data: None,
    },
    Migration {
        version: 25,
        name: "entity_name_lookups",
        sqlite: include_str!("../../../migrations/sqlite/0025_entity_name_lookups.sql"),
        postgres: include_str!("../../../migrations/postgres/0025_entity_name_lookups.sql"),
        data: None,
    },
    Migration {
        version: 26,
        name: "kept_private",
        sqlite: include_str!("../../../migrations/sqlite/0026_kept_private.sql"),
        postgres: include_str!("../../../migrations/postgres/0026_kept_private.sql"),
        data: None,
    },
    Migration {
        version: 27,
        name: "fts_prefix",
        sqlite: include_str!("../../../migrations/sqlite/0027_fts_prefix.sql"),
        postgres: include_str!("../../../migrations/postgres/0027_fts_prefix.sql"),
        data: None,
    },
    Migration {
        version: 28,
        name: "claims_per_model",
        sqlite: include_str!("../../../migrations/sqlite/0028_claims_per_model.sql"),
        postgres: include_str!("../../../migrations/postgres/0028_claims_per_model.sql"),
        data: None,
    },
    Migration {
        version: 29,
        name: "client_networks",
        sqlite: include_str!("../../../migrations/sqlite/0029_client_networks.sql"),
        postgres: include_str!("../../../migrations/postgres/0029_client_networks.sql"),
        data: None,
    },
];

/// The schema version the ledger in `conn` records (0 when empty), or
/// `TooNew` when a newer release wrote it (`migrate` and `copy`'s check of
/// its destination).
pub(crate) async fn schema_version_known(conn: &mut sqlx::AnyConnection) -> Result<i64, OpenError> {
    let current: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM zm_schema_migrations")
        .fetch_one(&mut *conn)
        .await?;
    let current = current.unwrap_or(0);
    let known = latest_schema_version();
    if current > known {
        return Err(OpenError::TooNew {
            found: current,
            known,
        });
    }
    Ok(current)
}

/// The newest schema version this build knows.
pub fn latest_schema_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Why a store could not be opened. These are operator errors, not tool
/// errors: they never reach an MCP or HTTP client.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("unsupported database URL {0:?}: use sqlite://PATH or postgres://…")]
    BadUrl(String),
    #[error(
        "the database was written by a newer zero-memory (schema version {found}, this build knows up to {known}); upgrade zero-memory — the database was not modified"
    )]
    TooNew { found: i64, known: i64 },
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("the stored secret {0:?} is corrupt (server_secrets); restore it from a backup")]
    CorruptSecret(&'static str),
    #[error("cannot prepare the data directory: {0}")]
    Io(#[from] std::io::Error),
    #[error("no answer from the database within {0} s")]
    Unreachable(u64),
    #[error(
        "the database is at schema version {found} and this build needs {known}: run `zero-memory migrate` first (back the database up before: docs/BACKUP.md); `serve`, `stdio` and `user add` also migrate it — the database was not modified"
    )]
    Behind { found: i64, known: i64 },
}

/// Log a failure and return the generic `internal` error.
pub(crate) fn internal(context: &str, err: impl std::fmt::Display) -> ToolError {
    tracing::error!(target: "zm_store", error = %err, "{context}");
    ToolError::internal()
}

/// Log a database failure and return the generic `internal` error. A
/// statement that lost to concurrent writes ([`is_contention`]) inside
/// [`watch_contention`] marks the watched run as worth re-running (the
/// tool service re-runs a write call from scratch) and is logged at warn;
/// anywhere else it is an error like any other.
pub(crate) fn database(context: &str, err: &sqlx::Error) -> ToolError {
    if is_contention(err) && CONTENTION.try_with(|lost| lost.set(true)).is_ok() {
        tracing::warn!(target: "zm_store", error = %err, contention = true, "{context}");
        return ToolError::internal();
    }
    if holds_nul(err) {
        // A text no check before the database refused: the caller's to
        // fix, so not `internal` (and nothing of the SQL reaches them).
        tracing::warn!(target: "zm_store", error = %err, "{context}");
        return ToolError::validation(NUL_IN_TEXT);
    }
    if has_code(err, &GONE_MEANWHILE_CODES) {
        // A row the statement refers to went between the call's checks
        // and its write (an account erased, a memory deleted by another
        // call): the caller's to retry or rethink, not a fault of ours.
        tracing::warn!(target: "zm_store", error = %err, "{context}");
        return ToolError::conflict(GONE_MEANWHILE);
    }
    if is_overload(err) {
        // Load, not a fault: the same call a moment later may well pass
        // (an agent retries `rate_limited`, not `internal`).
        tracing::warn!(target: "zm_store", error = %err, overload = true, "{context}");
        return ToolError::rate_limited(
            "The database is busy; the call did not complete and nothing of it was written. Retry shortly.",
        );
    }
    internal(context, err)
}

/// A reference that no longer holds: SQLite's `SQLITE_CONSTRAINT_FOREIGNKEY`
/// (787), PostgreSQL's `foreign_key_violation` (23503).
const GONE_MEANWHILE_CODES: [&str; 2] = ["787", "23503"];

/// What a write that met [`GONE_MEANWHILE_CODES`] is told.
pub(crate) const GONE_MEANWHILE: &str = "Something this call refers to was removed while it ran (an account erased, a memory deleted meanwhile); nothing of it was written.";

/// SQLite's result codes for a database held by another writer past the
/// busy timeout (`SQLITE_BUSY` and its extended codes), and PostgreSQL's
/// SQLSTATEs of load: `lock_not_available` (an operator's
/// `lock_timeout`), `query_canceled` (a `statement_timeout`). Not
/// `SQLITE_LOCKED` (a conflict within one connection: a fault), nor a
/// pool's timeout, which also ends the retries of a database that is
/// down, unreachable or out of connections (sqlx retries those until its
/// wait runs out): an outage is `internal`, and alerted on as such.
const OVERLOAD_CODES: [&str; 5] = ["5", "261", "517", "55P03", "57014"];

/// Did this fail for load (the database busy past its wait) rather than
/// for a fault?
pub(crate) fn is_overload(err: &sqlx::Error) -> bool {
    has_code(err, &OVERLOAD_CODES)
}

/// Did the database answer with one of `codes` (its own error code: a
/// SQLite result code, a PostgreSQL SQLSTATE)?
fn has_code(err: &sqlx::Error, codes: &[&str]) -> bool {
    match err {
        sqlx::Error::Database(e) => e.code().is_some_and(|code| codes.contains(&code.as_ref())),
        _ => false,
    }
}

/// What a text holding U+0000 is told when it reaches PostgreSQL.
pub(crate) const NUL_IN_TEXT: &str =
    "A text holds a NUL character (U+0000), which no field accepts.";

/// Did PostgreSQL refuse a text for holding U+0000 (SQLSTATE 22021,
/// `character_not_in_repertoire`, "invalid byte sequence for encoding
/// \"UTF8\": 0x00")? Every way in validates text first (tool inputs,
/// the HTTP layer); this is the net under them.
pub(crate) fn holds_nul(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(e) => {
            e.code().is_some_and(|code| code == "22021") && e.message().contains("0x00")
        }
        _ => false,
    }
}

/// PostgreSQL's SQLSTATEs after which the transaction was aborted only
/// because of what ran beside it, so the same work in a new transaction
/// may well succeed: `deadlock_detected` (this transaction was the
/// victim) and `serialization_failure`.
const CONTENTION_SQLSTATES: [&str; 2] = ["40P01", "40001"];

/// Did this statement lose to concurrent writes (a deadlock victim, a
/// serialization failure)? SQLite never answers these codes: its writers
/// queue (`BEGIN IMMEDIATE`, the busy timeout).
pub(crate) fn is_contention(err: &sqlx::Error) -> bool {
    has_code(err, &CONTENTION_SQLSTATES)
}

tokio::task_local! {
    /// Whether a database failure of the run [`watch_contention`] scopes
    /// was contention (set by [`database`]).
    static CONTENTION: std::cell::Cell<bool>;
}

/// Run `fut`, noting whether a database failure in it lost to concurrent
/// writes: its output, and that. A nested watch keeps its failures to
/// itself (a batch's item does not mark its batch).
pub(crate) async fn watch_contention<F: Future>(fut: F) -> (F::Output, bool) {
    CONTENTION
        .scope(std::cell::Cell::new(false), async move {
            let out = fut.await;
            (out, CONTENTION.with(std::cell::Cell::get))
        })
        .await
}

/// `?`-friendly conversion of sqlx errors into the generic internal error
/// (through [`database`]).
pub(crate) trait DbResult<T> {
    fn db(self, context: &str) -> Result<T, ToolError>;
}

impl<T> DbResult<T> for Result<T, sqlx::Error> {
    fn db(self, context: &str) -> Result<T, ToolError> {
        self.map_err(|e| database(context, &e))
    }
}

/// What a SQLite URL's path escapes: sqlx percent-decodes the path (so a
/// `%` must be written `%25`) and ends it at the first `?`.
const SQLITE_PATH_ESCAPES: &percent_encoding::AsciiSet =
    &percent_encoding::CONTROLS.add(b'%').add(b'?').add(b'#');

/// The SQLite URL of a file path (a `%`, `?` or `#` in it escaped, so that
/// sqlx opens exactly this file).
pub fn sqlite_url(path: &std::path::Path) -> String {
    let path = path.display().to_string();
    format!(
        "sqlite://{}?mode=rwc",
        percent_encoding::utf8_percent_encode(&path, SQLITE_PATH_ESCAPES)
    )
}

/// The file a SQLite URL names (`sqlite:///abs/path.db?mode=rwc`,
/// `sqlite:relative.db`), its `%XX` escapes decoded as sqlx decodes them
/// when it opens the file; `None` for another scheme or no path. The one
/// parser of SQLite URLs: the store, the CLI's file modes and the
/// configuration check all read the path through it, so the file whose
/// mode they set is the file sqlx writes.
pub fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let path = rest.trim_start_matches("//").split('?').next()?;
    if path.is_empty() {
        return None;
    }
    let decoded = percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .map_or_else(|_| path.to_string(), std::borrow::Cow::into_owned);
    Some(std::path::PathBuf::from(decoded))
}

/// Options for opening a store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub url: String,
    pub max_connections: u32,
    /// SQLite `synchronous`: `FULL` (default: no acknowledged write is lost
    /// even on power loss) or `NORMAL`.
    pub sqlite_synchronous: String,
    /// The free-text limit and the storage quotas.
    pub limits: crate::Limits,
    /// SQLite `mmap_size`: reads through the OS page cache instead of
    /// `read(2)` copies. Mapped pages count in the process's resident
    /// memory, once per connection that touched them.
    pub sqlite_mmap_bytes: u64,
    /// Apply pending migrations on open (the default). Without, a database
    /// that has any is refused ([`OpenError::Behind`]): a command that
    /// only reads or manages accounts does not move the schema under a
    /// running server of the previous version.
    pub migrate: bool,
}

impl OpenOptions {
    pub fn new(url: impl Into<String>) -> Self {
        OpenOptions {
            url: url.into(),
            max_connections: 8,
            sqlite_synchronous: "FULL".into(),
            limits: crate::Limits::default(),
            sqlite_mmap_bytes: 256 * 1024 * 1024,
            migrate: true,
        }
    }
}

/// How long a SQLite connection waits for another's write lock.
const SQLITE_BUSY_TIMEOUT: &str = "PRAGMA busy_timeout = 30000";

/// How long opening waits for the database's first answer.
const FIRST_CONTACT: Duration = Duration::from_secs(30);

/// One connection and one read, before the pool: the pool retries what
/// fails (a refused connection, a file that is no database) until its
/// acquire timeout and then reports only that it timed out, so the cause
/// (`connection refused`, `file is not a database`, a wrong password) is
/// found here and said at once.
async fn first_contact(connect: &AnyConnectOptions, backend: Backend) -> Result<(), OpenError> {
    use sqlx::{ConnectOptions, Connection};
    let probe = async {
        let mut conn = connect.connect().await?;
        if backend == Backend::Sqlite {
            // Another process's write lock is waited for, as the pool does.
            conn.execute(SQLITE_BUSY_TIMEOUT).await?;
        }
        let read = match backend {
            Backend::Sqlite => "SELECT count(*) FROM sqlite_master",
            Backend::Postgres => "SELECT 1",
        };
        conn.execute(read).await?;
        conn.close().await
    };
    match tokio::time::timeout(FIRST_CONTACT, probe).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(OpenError::Unreachable(FIRST_CONTACT.as_secs())),
    }
}

pub(crate) async fn connect(opts: &OpenOptions) -> Result<(AnyPool, Backend), OpenError> {
    sqlx::any::install_default_drivers();
    let backend = if opts.url.starts_with("sqlite:") {
        Backend::Sqlite
    } else if opts.url.starts_with("postgres://") || opts.url.starts_with("postgresql://") {
        Backend::Postgres
    } else {
        return Err(OpenError::BadUrl(opts.url.clone()));
    };
    if let Some(path) = sqlite_path(&opts.url)
        && let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    let connect = AnyConnectOptions::from_str(&opts.url)?;
    let sync = if opts.sqlite_synchronous.eq_ignore_ascii_case("normal") {
        "NORMAL"
    } else {
        "FULL"
    };
    first_contact(&connect, backend).await?;
    let mmap_bytes = opts.sqlite_mmap_bytes;
    let pool = AnyPoolOptions::new()
        .max_connections(opts.max_connections)
        .acquire_timeout(Duration::from_secs(30))
        .test_before_acquire(backend == Backend::Postgres)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                if backend == Backend::Sqlite {
                    conn.execute(SQLITE_BUSY_TIMEOUT).await?;
                    conn.execute("PRAGMA journal_mode = WAL").await?;
                    conn.execute("PRAGMA foreign_keys = ON").await?;
                    // Reads through the page cache of the OS, not read(2) copies.
                    let mmap = format!("PRAGMA mmap_size = {mmap_bytes}");
                    conn.execute(sqlx::AssertSqlSafe(mmap)).await?;
                    let sql = if sync == "NORMAL" {
                        "PRAGMA synchronous = NORMAL"
                    } else {
                        "PRAGMA synchronous = FULL"
                    };
                    conn.execute(sql).await?;
                } else {
                    // Every statement runs at READ COMMITTED whatever the
                    // server's or role's default: the one-statement upserts
                    // (rate windows, MCP sessions, embedding claims, the
                    // server's secrets) are written for it, and under
                    // REPEATABLE READ two at once on one row fail with a
                    // serialization error instead of taking turns.
                    conn.execute(PG_SESSION_ISOLATION).await?;
                    // A transaction left idle in the middle (its instance
                    // frozen or cut off) ends with its locks after this,
                    // instead of holding them until TCP gives up (hours).
                    conn.execute(PG_IDLE_IN_TRANSACTION).await?;
                }
                Ok(())
            })
        })
        .connect_with(connect)
        .await?;
    Ok((pool, backend))
}

/// Set on every PostgreSQL connection (see `open_pool`).
pub(crate) const PG_SESSION_ISOLATION: &str =
    "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED";
/// Set on every PostgreSQL connection (see `open_pool`); a `copy` lifts it
/// for its own two transactions, whose statements can wait minutes on
/// each other.
pub(crate) const PG_IDLE_IN_TRANSACTION: &str = "SET idle_in_transaction_session_timeout = '5min'";

/// What several instances on one PostgreSQL database take turns at: one
/// advisory-lock key each.
#[derive(Debug, Clone, Copy)]
pub(crate) enum InstanceLock {
    /// Applying migrations at start.
    Migrations = 7_410_431,
    /// Admitting an MCP session (the per-user counts).
    SessionAdmission = 7_410_432,
    /// The near-duplicate sweep by meaning (no pair filed twice).
    MeaningSweep = 7_410_433,
    /// Creating a user (one first user, the owner; one user per email).
    UserCreation = 7_410_434,
}

/// The first key of the two-key advisory locks that order an owner's
/// writes of new memories (`Store::hold_writes_of`; the second key is a
/// hash of the owner). PostgreSQL keeps two-key advisory locks apart from
/// the one-key [`InstanceLock`]s.
pub(crate) const OWNER_WRITES_LOCK_CLASS: i32 = 7_410_440;

/// The two keys of the PostgreSQL advisory lock that orders `owner`'s
/// writes of new memories against the sharing of their projects (for
/// tests that hold it, and scripts that write memories' rows directly).
pub fn owner_writes_lock(owner: &str) -> (i32, i32) {
    use sha2::Digest;
    let key = sha2::Sha256::digest(owner.as_bytes());
    (
        OWNER_WRITES_LOCK_CLASS,
        i32::from_be_bytes([key[0], key[1], key[2], key[3]]),
    )
}

/// On PostgreSQL, wait for `lock` until the transaction ends; nothing on
/// SQLite, whose `BEGIN IMMEDIATE` already serializes writers. Must be the
/// transaction's first statement: it pins READ COMMITTED, whatever the
/// server's default, so that what follows sees what the holder before
/// committed (under REPEATABLE READ the snapshot would date from before
/// the wait, and the lock would order nothing).
pub(crate) async fn lock_across_instances(
    tx: &mut sqlx::AnyConnection,
    backend: Backend,
    lock: InstanceLock,
) -> Result<(), sqlx::Error> {
    if backend != Backend::Postgres {
        return Ok(());
    }
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut *tx)
        .await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(lock as i64)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Apply pending migrations (or, with `apply` false, refuse a database
/// that has any); refuse a database from a newer build.
pub(crate) async fn migrate(
    pool: &AnyPool,
    backend: Backend,
    clock: &Arc<Clock>,
    apply: bool,
) -> Result<i64, OpenError> {
    migrate_to(pool, backend, clock, apply, latest_schema_version()).await
}

/// [`migrate`], applying only the pending migrations up to `target` (the
/// migration tests build a database of an older schema with it). The
/// checks stay against the newest version this build knows: a database
/// from a newer build is refused, and with `apply` false so is one behind
/// it. Answers the version the database is at afterwards.
pub(crate) async fn migrate_to(
    pool: &AnyPool,
    backend: Backend,
    clock: &Arc<Clock>,
    apply: bool,
    target: i64,
) -> Result<i64, OpenError> {
    let begin = match backend {
        Backend::Sqlite => "BEGIN IMMEDIATE",
        Backend::Postgres => "BEGIN",
    };
    let mut tx = pool.begin_with(begin).await?;
    // One migrator at a time across processes.
    lock_across_instances(&mut tx, backend, InstanceLock::Migrations).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS zm_schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
    )
    .execute(&mut *tx)
    .await?;
    let current = match schema_version_known(&mut tx).await {
        Ok(current) => current,
        Err(e) => {
            tx.rollback().await?;
            return Err(e);
        }
    };
    let known = latest_schema_version();
    if current < known && !apply {
        tx.rollback().await?;
        return Err(OpenError::Behind {
            found: current,
            known,
        });
    }
    for m in MIGRATIONS
        .iter()
        .filter(|m| m.version > current && m.version <= target)
    {
        let sql = match backend {
            Backend::Sqlite => m.sqlite,
            Backend::Postgres => m.postgres,
        };
        // Debug, not info: `stdio` opens the database on every client start
        // and keeps stderr quiet.
        tracing::debug!(target: "zm_store", version = m.version, name = m.name, "applying migration");
        tx.execute(sqlx::raw_sql(sqlx::AssertSqlSafe(sql))).await?;
        match m.data {
            Some(DataStep::RekeyEntities) => {
                rekey_entities(&mut tx).await?;
            }
            None => {}
        }
        sqlx::query(
            "INSERT INTO zm_schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
        )
        .bind(m.version)
        .bind(m.name)
        .bind(clock.now_ms())
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(current.max(target.min(known)))
}

/// Migration 15's step: every entity's match key recomputed from its name
/// by today's [`crate::memories::match_key`] (Unicode-normalised), and the
/// entities of one scope and type whose keys now agree merged into the
/// oldest: their mentions and edges move to it (a pair it already has is
/// kept once; an edge that would link it to itself is dropped), then the
/// others are deleted. Runs inside the migration's transaction; answers
/// how many entities it re-keyed and how many it merged away.
async fn rekey_entities(tx: &mut sqlx::AnyConnection) -> Result<(usize, usize), sqlx::Error> {
    use sqlx::Row;
    use std::collections::HashMap;
    let rows = sqlx::query(
        "SELECT id, scope, type, name, match_key FROM entities ORDER BY created_at, id",
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut kept: HashMap<(String, String, String), String> = HashMap::new();
    let (mut merges, mut rekeys) = (Vec::new(), Vec::new());
    for row in &rows {
        let id: String = row.try_get("id")?;
        let name: String = row.try_get("name")?;
        let stored: String = row.try_get("match_key")?;
        let key = crate::memories::match_key(&name);
        let slot = (row.try_get("scope")?, key.clone(), row.try_get("type")?);
        match kept.get(&slot) {
            Some(oldest) => merges.push((id, oldest.clone())),
            None => {
                kept.insert(slot, id.clone());
                if key != stored {
                    rekeys.push((id, key));
                }
            }
        }
    }
    // Each moves what `$1` (merged away) has to `$2` (the oldest), but a
    // pair `$2` already has and an edge that would link `$2` to itself.
    const MOVES: [&str; 3] = [
        "UPDATE memory_entities SET entity_id = $2 WHERE entity_id = $1 AND NOT EXISTS \
         (SELECT 1 FROM memory_entities m WHERE m.memory_id = memory_entities.memory_id AND m.entity_id = $2)",
        "UPDATE edges SET src = $2 WHERE src = $1 AND dst <> $2 AND NOT EXISTS \
         (SELECT 1 FROM edges e WHERE e.src = $2 AND e.dst = edges.dst AND e.type = edges.type)",
        "UPDATE edges SET dst = $2 WHERE dst = $1 AND src <> $2 AND NOT EXISTS \
         (SELECT 1 FROM edges e WHERE e.dst = $2 AND e.src = edges.src AND e.type = edges.type)",
    ];
    for (from, into) in &merges {
        for sql in MOVES {
            sqlx::query(sql)
                .bind(from)
                .bind(into)
                .execute(&mut *tx)
                .await?;
        }
        // What did not move (a pair the oldest already has, a self-link)
        // goes with the entity (ON DELETE CASCADE).
        sqlx::query("DELETE FROM entities WHERE id = $1")
            .bind(from)
            .execute(&mut *tx)
            .await?;
    }
    // Two passes, so that no key is briefly held twice: first a key no
    // name can have (keys hold no whitespace), then the new one.
    for (id, _) in &rekeys {
        sqlx::query("UPDATE entities SET match_key = $1 WHERE id = $2")
            .bind(format!(" rekey {id}"))
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    for (id, key) in &rekeys {
        sqlx::query("UPDATE entities SET match_key = $1 WHERE id = $2")
            .bind(key)
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    // Said only when it changed something: `stdio` migrates a new database
    // at every client start and keeps stderr quiet.
    if !rekeys.is_empty() || !merges.is_empty() {
        tracing::info!(
            target: "zm_store",
            rekeyed = rekeys.len(),
            merged = merges.len(),
            "entity match keys normalised"
        );
    }
    Ok((rekeys.len(), merges.len()))
}

/// A 32-byte server secret by name, in hex: created once (the first open
/// of this database wins a race: `ON CONFLICT DO NOTHING`, then read back),
/// then read by every process on the database — so every instance on one
/// database signs and verifies with the same key.
async fn server_secret(
    pool: &AnyPool,
    clock: &Arc<Clock>,
    name: &'static str,
) -> Result<String, OpenError> {
    const READ: &str = "SELECT value FROM server_secrets WHERE name = $1";
    let stored: Option<String> = sqlx::query_scalar(READ)
        .bind(name)
        .fetch_optional(pool)
        .await?;
    Ok(match stored {
        Some(v) => v,
        None => {
            sqlx::query(
                "INSERT INTO server_secrets (name, value, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
            )
            .bind(name)
            .bind(crate::threads::ThreadKey::generate_hex())
            .bind(clock.now_ms())
            .execute(pool)
            .await?;
            sqlx::query_scalar(READ).bind(name).fetch_one(pool).await?
        }
    })
}

/// The thread-signing key (also keys export cursors).
pub(crate) async fn thread_key(
    pool: &AnyPool,
    clock: &Arc<Clock>,
) -> Result<crate::threads::ThreadKey, OpenError> {
    let stored = server_secret(pool, clock, "thread_key").await?;
    crate::threads::ThreadKey::from_hex(&stored).ok_or(OpenError::CorruptSecret("thread_key"))
}

/// The key of the OAuth sign-in form's CSRF token (an HMAC key): one per
/// database, so a form one instance rendered is accepted by another.
pub(crate) async fn form_key(pool: &AnyPool, clock: &Arc<Clock>) -> Result<[u8; 32], OpenError> {
    let stored = server_secret(pool, clock, "oauth_form_key").await?;
    hex::decode(stored.trim())
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or(OpenError::CorruptSecret("oauth_form_key"))
}

#[cfg(test)]
mod migration_tests;

#[cfg(test)]
mod tests {
    /// Load (SQLite busy past its timeout, PostgreSQL's lock or statement
    /// timeouts, its connections all taken) answers `rate_limited`, which an
    /// agent retries; a fault stays `internal`, saying nothing of it.
    #[test]
    fn load_is_rate_limited_and_a_fault_internal() {
        use zm_contracts::ErrorCode;
        for err in [coded("5"), coded("517"), coded("55P03"), coded("57014")] {
            let e = super::database("a test", &err);
            assert_eq!(e.code, ErrorCode::RateLimited, "{err}");
            assert!(!e.message.contains("error"), "{}", e.message);
        }
        // A pool's timeout may be an outage (a server down), and
        // SQLITE_LOCKED a fault: both stay `internal`.
        for err in [
            coded("23505"),
            coded("19"),
            coded("6"),
            sqlx::Error::PoolTimedOut,
            sqlx::Error::RowNotFound,
        ] {
            let e = super::database("a test", &err);
            assert_eq!(e.code, ErrorCode::Internal, "{err}");
            assert_eq!(e.message, "Internal server error.");
        }
    }

    use super::*;
    use std::path::PathBuf;

    /// A write referring to a row that is gone (an account erased while
    /// the call ran) is a `conflict`, on both backends, as the databases
    /// really answer it; not `internal`.
    #[tokio::test]
    async fn a_reference_gone_meanwhile_is_a_conflict() {
        for err in [coded("787"), coded("23503")] {
            let e = super::database("a test", &err);
            assert_eq!(e.code, zm_contracts::ErrorCode::Conflict, "{err}");
            assert_eq!(e.message, GONE_MEANWHILE);
        }
        for (label, _dir, store) in crate::testing::stores().await {
            let err = sqlx::query(
                "INSERT INTO memory_usage (user_id, memory_id, recalls, last_recalled_at) VALUES ($1, $2, 1, 1)",
            )
            .bind("usr_gone")
            .bind("mem_gone")
            .execute(&store.pool)
            .await
            .expect_err("a reference to nothing");
            let e = super::database("a test", &err);
            assert_eq!(e.code, zm_contracts::ErrorCode::Conflict, "[{label}] {err}");
        }
    }

    /// An entity's deletion finds the edges pointing at it through an
    /// index, not by reading every edge.
    #[tokio::test]
    async fn edges_are_found_by_target_through_an_index() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let rows = sqlx::query("EXPLAIN QUERY PLAN SELECT 1 FROM edges WHERE dst = 'x'")
            .fetch_all(&store.pool)
            .await
            .unwrap();
        let plan: Vec<String> = rows
            .iter()
            .map(|r| crate::rows::col::<String>(r, "detail").unwrap_or_default())
            .collect();
        assert!(
            // A search by `dst`, not a scan (of the table, or of the
            // unique index whose first column is `src`).
            plan.iter()
                .any(|d| d.starts_with("SEARCH") && d.contains("(dst=?)")),
            "{plan:?}"
        );
    }

    /// Every PostgreSQL connection ends a transaction left idle after
    /// five minutes, and runs at READ COMMITTED even on a server whose
    /// default is REPEATABLE READ.
    #[tokio::test]
    async fn postgres_connections_carry_their_session_settings() {
        let Some(url) = crate::test_database_url_repeatable_read() else {
            return;
        };
        let mut opts = OpenOptions::new(url);
        opts.max_connections = 2;
        let store = crate::Store::open_with(opts).await.unwrap();
        let mut conn = store.pool.acquire().await.unwrap();
        let idle: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(idle, "5min");
        let isolation: String = sqlx::query_scalar("SHOW default_transaction_isolation")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(isolation, "read committed", "whatever the server's default");
        drop(conn);
        store.close().await;
    }

    /// Opened without migrating, a database a migration behind is refused
    /// and left as it was.
    #[tokio::test]
    async fn a_database_behind_is_refused_unless_migrating() {
        let (dir, store) = crate::testing::sqlite_store().await;
        let url = crate::sqlite_url(&dir.path().join("zm.db"));
        let known = latest_schema_version();
        sqlx::query("DELETE FROM zm_schema_migrations WHERE version = $1")
            .bind(known)
            .execute(&store.pool)
            .await
            .unwrap();
        store.close().await;
        let mut opts = OpenOptions::new(url.clone());
        opts.migrate = false;
        match crate::Store::open_with(opts).await {
            Err(OpenError::Behind { found, known: k }) => {
                assert_eq!((found, k), (known - 1, known));
            }
            other => panic!("not refused: {:?}", other.map(|_| ())),
        }
        // The last migration's statements are not all repeatable: only
        // its row is checked here, not a second run of it.
        let pool = AnyPool::connect(&url).await.unwrap();
        let left: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM zm_schema_migrations")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(left, Some(known - 1), "left as it was");
    }

    /// Migration 15's step merges entities stored under the old keys whose
    /// names now agree (a composed and a decomposed "Café"), moving their
    /// mentions and edges to the oldest, and re-keys the rest; a second
    /// run changes nothing. Every backend.
    #[tokio::test]
    async fn rekey_merges_entities_whose_keys_now_agree() {
        use serde_json::json;
        use sqlx::Row;
        use zm_contracts::{IdKind, ToolName};
        for (label, _dir, store) in crate::testing::stores().await {
            let caller = crate::testing::test_caller(&store, "rekey").await;
            let service = crate::ToolService::new(store.clone());
            let mut memories = Vec::new();
            for content in ["Zola wrote about the café.", "The café opens at eight."] {
                let out = service
                    .call(
                        &caller,
                        ToolName::parse("remember").unwrap(),
                        &json!({"content": content, "kind": "fact", "scope": "personal", "entities": [{"name": "Zola"}]}),
                    )
                    .await
                    .unwrap()
                    .to_json();
                memories.push(out["memory_id"].as_str().unwrap().to_string());
            }
            let zola = sqlx::query(
                "SELECT id, scope, type FROM entities WHERE owner_id = $1 AND match_key = 'zola'",
            )
            .bind(&caller.user_id)
            .fetch_one(&store.pool)
            .await
            .unwrap();
            let (zola, scope, ty): (String, String, String) =
                (zola.get("id"), zola.get("scope"), zola.get("type"));
            // As the old key rule stored them: lowercase, nothing normalised.
            let old = [
                ("Caf\u{e9}", "caf\u{e9}"),
                ("Cafe\u{301}", "cafe\u{301}"),
                ("\u{ff21}\u{ff30}\u{ff29}", "\u{ff41}\u{ff50}\u{ff49}"),
            ];
            let mut ids = Vec::new();
            for (at, (name, key)) in (1_i64..).zip(old) {
                let id = IdKind::Entity.generate();
                sqlx::query("INSERT INTO entities (id, owner_id, scope, name, match_key, type, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)")
                    .bind(&id).bind(&caller.user_id).bind(&scope).bind(name).bind(key).bind(&ty).bind(at)
                    .execute(&store.pool).await.unwrap();
                ids.push(id);
            }
            let (composed, decomposed, api) = (&ids[0], &ids[1], &ids[2]);
            for (memory, entity) in [
                (&memories[0], composed),
                (&memories[0], decomposed),
                (&memories[1], decomposed),
            ] {
                sqlx::query("INSERT INTO memory_entities (memory_id, entity_id) VALUES ($1, $2)")
                    .bind(memory)
                    .bind(entity)
                    .execute(&store.pool)
                    .await
                    .unwrap();
            }
            for (src, dst, ty) in [
                (composed, &zola, "relates_to"),
                (decomposed, &zola, "relates_to"),
                (decomposed, api, "depends_on"),
                (composed, decomposed, "relates_to"),
                (&zola, decomposed, "mentions"),
            ] {
                sqlx::query("INSERT INTO edges (id, owner_id, src, dst, type, weight, source_memory, created_at) VALUES ($1, $2, $3, $4, $5, NULL, NULL, 1)")
                    .bind(IdKind::Edge.generate()).bind(&caller.user_id).bind(src).bind(dst).bind(ty)
                    .execute(&store.pool).await.unwrap();
            }

            let mut tx = store.pool.begin().await.unwrap();
            let (rekeyed, merged) = rekey_entities(&mut tx).await.unwrap();
            tx.commit().await.unwrap();
            assert_eq!(
                merged, 1,
                "[{label}] the decomposed Café merged into the composed one"
            );
            assert!(rekeyed >= 1, "[{label}] the full-width name re-keyed");

            let keys: Vec<(String, String)> = sqlx::query(
                "SELECT id, match_key FROM entities WHERE owner_id = $1 ORDER BY created_at, id",
            )
            .bind(&caller.user_id)
            .fetch_all(&store.pool)
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get("id"), r.get("match_key")))
            .collect();
            assert_eq!(
                keys,
                vec![
                    (composed.clone(), "caf\u{e9}".to_string()),
                    (api.clone(), "api".to_string()),
                    (zola.clone(), "zola".to_string())
                ],
                "[{label}] one Café, the full-width API re-keyed"
            );
            let mentions: Vec<(String, String)> = sqlx::query("SELECT memory_id, entity_id FROM memory_entities WHERE entity_id IN ($1, $2) ORDER BY memory_id")
                .bind(composed).bind(decomposed).fetch_all(&store.pool).await.unwrap()
                .iter().map(|r| (r.get("memory_id"), r.get("entity_id"))).collect();
            let mut want = vec![
                (memories[0].clone(), composed.clone()),
                (memories[1].clone(), composed.clone()),
            ];
            want.sort();
            assert_eq!(
                mentions, want,
                "[{label}] mentions moved, the shared one kept once"
            );
            let mut edges: Vec<(String, String, String)> =
                sqlx::query("SELECT src, dst, type FROM edges WHERE owner_id = $1")
                    .bind(&caller.user_id)
                    .fetch_all(&store.pool)
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| (r.get("src"), r.get("dst"), r.get("type")))
                    .collect();
            edges.sort();
            let mut want = vec![
                (composed.clone(), zola.clone(), "relates_to".to_string()),
                (composed.clone(), api.clone(), "depends_on".to_string()),
                (zola.clone(), composed.clone(), "mentions".to_string()),
            ];
            want.sort();
            assert_eq!(
                edges, want,
                "[{label}] edges moved, the duplicate and the self-link dropped"
            );

            let mut tx = store.pool.begin().await.unwrap();
            let again = rekey_entities(&mut tx).await.unwrap();
            tx.commit().await.unwrap();
            assert_eq!(again, (0, 0), "[{label}] a second run changes nothing");
        }
    }

    /// A database error with a SQLSTATE, as a driver reports one.
    #[derive(Debug)]
    struct Coded(&'static str);

    impl std::fmt::Display for Coded {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "error with SQLSTATE {}", self.0)
        }
    }

    impl std::error::Error for Coded {}

    impl sqlx::error::DatabaseError for Coded {
        fn message(&self) -> &str {
            "coded"
        }
        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(self.0.into())
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn coded(code: &'static str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(Coded(code)))
    }

    /// A deadlock victim (40P01) and a serialization failure (40001) lost
    /// to concurrent writes; a unique violation, a lost connection or a
    /// row not found did not. Inside a watch, only the former mark it
    /// (a nested watch keeps its own), and every failure still answers
    /// `internal` (the tool service decides what the caller sees).
    #[tokio::test]
    async fn contention_is_classified_by_sqlstate() {
        assert!(is_contention(&coded("40P01")));
        assert!(is_contention(&coded("40001")));
        assert!(!is_contention(&coded("23505")));
        assert!(!is_contention(&coded("25P02")));
        assert!(!is_contention(&sqlx::Error::RowNotFound));
        assert!(!is_contention(&sqlx::Error::PoolTimedOut));

        let fail = |code| async move { Err::<(), _>(coded(code)).db("test") };
        let (out, lost) = watch_contention(fail("40P01")).await;
        assert_eq!(out, Err(ToolError::internal()));
        assert!(lost, "a deadlock victim marks the watched run");
        let (_, lost) = watch_contention(fail("40001")).await;
        assert!(lost, "a serialization failure marks the watched run");
        let (out, lost) = watch_contention(fail("23505")).await;
        assert_eq!(out, Err(ToolError::internal()));
        assert!(!lost, "another failure does not");
        let (_, lost) = watch_contention(async {
            let (_, inner) = watch_contention(fail("40P01")).await;
            assert!(inner, "the inner watch sees its own");
        })
        .await;
        assert!(!lost, "a nested watch keeps its failures to itself");
        // Outside any watch: nothing to mark, the same answer.
        assert_eq!(fail("40P01").await, Err(ToolError::internal()));
    }

    /// A write outside the tool service (team administration, a rule's
    /// change) that lost to concurrent writes runs again, up to four
    /// attempts; one that loses every time answers `conflict`; any other
    /// failure, and a success, are the first attempt's answer.
    #[tokio::test]
    async fn a_write_that_lost_runs_again() {
        use std::sync::atomic::{AtomicU32, Ordering};
        use zm_contracts::ErrorCode;
        // Fails with `code` on its first `losses` runs, then succeeds.
        let run = |code: &'static str, losses: u32| {
            let runs = AtomicU32::new(0);
            async move {
                let out = crate::service::rerun_on_contention("test write", || async {
                    if runs.fetch_add(1, Ordering::Relaxed) < losses {
                        Err(coded(code)).db("test write")
                    } else {
                        Ok(())
                    }
                })
                .await;
                (out, runs.load(Ordering::Relaxed))
            }
        };
        assert_eq!(run("40P01", 0).await, (Ok(()), 1));
        assert_eq!(run("40P01", 2).await, (Ok(()), 3), "lost twice, then done");
        assert_eq!(
            run("40001", 3).await,
            (Ok(()), 4),
            "the fourth attempt is the last"
        );
        let (out, runs) = run("40P01", 4).await;
        assert_eq!(runs, 4, "never a fifth");
        assert_eq!(out.map_err(|e| e.code), Err(ErrorCode::Conflict));
        let (out, runs) = run("23505", 4).await;
        assert_eq!(runs, 1, "another failure is not run again");
        assert_eq!(out, Err(ToolError::internal()));
    }

    #[test]
    fn sqlite_paths() {
        assert_eq!(
            sqlite_path("sqlite:///var/lib/zm/zero-memory.db?mode=rwc"),
            Some(PathBuf::from("/var/lib/zm/zero-memory.db"))
        );
        assert_eq!(
            sqlite_path("sqlite:relative.db"),
            Some(PathBuf::from("relative.db"))
        );
        assert_eq!(sqlite_path("sqlite://?mode=rwc"), None);
        assert_eq!(sqlite_path("postgres://h/db"), None);
        let url = sqlite_url(std::path::Path::new("/tmp/a b/zm.db"));
        assert_eq!(sqlite_path(&url), Some(PathBuf::from("/tmp/a b/zm.db")));
        // `%XX` is read as sqlx reads it when it opens the file.
        assert_eq!(
            sqlite_path("sqlite:///backups/zm%202024.db"),
            Some(PathBuf::from("/backups/zm 2024.db"))
        );
        let odd = std::path::Path::new("/tmp/50%off?#1/zm.db");
        assert_eq!(sqlite_path(&sqlite_url(odd)).as_deref(), Some(odd));
    }

    /// The file a URL made by `sqlite_url` names is the file sqlx opens,
    /// whatever the path holds (`%`, `?`, `#`, a space): the CLI sets the
    /// modes of the file the store writes.
    #[tokio::test]
    async fn a_path_with_escapes_opens_that_very_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zm 50%25 off?x#1.db");
        let url = sqlite_url(&path);
        assert_eq!(sqlite_path(&url).as_deref(), Some(path.as_path()));
        let store = crate::Store::open(&url).await.expect("open");
        store.close().await;
        assert!(path.is_file(), "{url} did not open {}", path.display());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| n.starts_with("zm 50%25 off?x#1.db")),
            "{names:?}"
        );
    }
}
