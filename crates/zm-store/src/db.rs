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
}

/// A migration: its number, name and SQL per backend.
struct Migration {
    version: i64,
    name: &'static str,
    sqlite: &'static str,
    postgres: &'static str,
}

static MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sqlite: include_str!("../../../migrations/sqlite/0001_initial.sql"),
        postgres: include_str!("../../../migrations/postgres/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "oauth",
        sqlite: include_str!("../../../migrations/sqlite/0002_oauth.sql"),
        postgres: include_str!("../../../migrations/postgres/0002_oauth.sql"),
    },
    Migration {
        version: 3,
        name: "signed_threads",
        sqlite: include_str!("../../../migrations/sqlite/0003_signed_threads.sql"),
        postgres: include_str!("../../../migrations/postgres/0003_signed_threads.sql"),
    },
    Migration {
        version: 4,
        name: "user_disabled",
        sqlite: include_str!("../../../migrations/sqlite/0004_user_disabled.sql"),
        postgres: include_str!("../../../migrations/postgres/0004_user_disabled.sql"),
    },
    Migration {
        version: 5,
        name: "storage_usage",
        sqlite: include_str!("../../../migrations/sqlite/0005_storage_usage.sql"),
        postgres: include_str!("../../../migrations/postgres/0005_storage_usage.sql"),
    },
    Migration {
        version: 6,
        name: "shared_state",
        sqlite: include_str!("../../../migrations/sqlite/0006_shared_state.sql"),
        postgres: include_str!("../../../migrations/postgres/0006_shared_state.sql"),
    },
    Migration {
        version: 7,
        name: "rank_index",
        sqlite: include_str!("../../../migrations/sqlite/0007_rank_index.sql"),
        postgres: include_str!("../../../migrations/postgres/0007_rank_index.sql"),
    },
    Migration {
        version: 8,
        name: "teams",
        sqlite: include_str!("../../../migrations/sqlite/0008_teams.sql"),
        postgres: include_str!("../../../migrations/postgres/0008_teams.sql"),
    },
    Migration {
        version: 9,
        name: "web_sessions",
        sqlite: include_str!("../../../migrations/sqlite/0009_web_sessions.sql"),
        postgres: include_str!("../../../migrations/postgres/0009_web_sessions.sql"),
    },
    Migration {
        version: 10,
        name: "memory_usage",
        sqlite: include_str!("../../../migrations/sqlite/0010_memory_usage.sql"),
        postgres: include_str!("../../../migrations/postgres/0010_memory_usage.sql"),
    },
    Migration {
        version: 11,
        name: "recall_activity",
        sqlite: include_str!("../../../migrations/sqlite/0011_recall_activity.sql"),
        postgres: include_str!("../../../migrations/postgres/0011_recall_activity.sql"),
    },
    Migration {
        version: 12,
        name: "memory_vectors",
        sqlite: include_str!("../../../migrations/sqlite/0012_memory_vectors.sql"),
        postgres: include_str!("../../../migrations/postgres/0012_memory_vectors.sql"),
    },
    Migration {
        version: 13,
        name: "conflict_pairs",
        sqlite: include_str!("../../../migrations/sqlite/0013_conflict_pairs.sql"),
        postgres: include_str!("../../../migrations/postgres/0013_conflict_pairs.sql"),
    },
    Migration {
        version: 14,
        name: "imported_memories",
        sqlite: include_str!("../../../migrations/sqlite/0014_imported_memories.sql"),
        postgres: include_str!("../../../migrations/postgres/0014_imported_memories.sql"),
    },
];

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
}

/// Log a database failure and return the generic `internal` error.
pub(crate) fn internal(context: &str, err: impl std::fmt::Display) -> ToolError {
    tracing::error!(target: "zm_store", error = %err, "{context}");
    ToolError::internal()
}

/// `?`-friendly conversion of sqlx errors into the generic internal error.
pub(crate) trait DbResult<T> {
    fn db(self, context: &str) -> Result<T, ToolError>;
}

impl<T> DbResult<T> for Result<T, sqlx::Error> {
    fn db(self, context: &str) -> Result<T, ToolError> {
        self.map_err(|e| internal(context, e))
    }
}

/// The SQLite URL of a file path.
pub fn sqlite_url(path: &std::path::Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

/// The file a SQLite URL names (`sqlite:///abs/path.db?mode=rwc`,
/// `sqlite:relative.db`); `None` for another scheme or no path. The one
/// parser of SQLite URLs: the store, the CLI's file modes and the
/// configuration check all read the path through it.
pub fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let path = rest.trim_start_matches("//").split('?').next()?;
    (!path.is_empty()).then(|| std::path::PathBuf::from(path))
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
}

impl OpenOptions {
    pub fn new(url: impl Into<String>) -> Self {
        OpenOptions {
            url: url.into(),
            max_connections: 8,
            sqlite_synchronous: "FULL".into(),
            limits: crate::Limits::default(),
            sqlite_mmap_bytes: 256 * 1024 * 1024,
        }
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
    let mmap_bytes = opts.sqlite_mmap_bytes;
    let pool = AnyPoolOptions::new()
        .max_connections(opts.max_connections)
        .acquire_timeout(Duration::from_secs(30))
        .test_before_acquire(backend == Backend::Postgres)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                if backend == Backend::Sqlite {
                    conn.execute("PRAGMA busy_timeout = 30000").await?;
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
                }
                Ok(())
            })
        })
        .connect_with(connect)
        .await?;
    Ok((pool, backend))
}

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
}

/// On PostgreSQL, wait for `lock` until the transaction ends; nothing on
/// SQLite, whose `BEGIN IMMEDIATE` already serializes writers. Must be the
/// transaction's first statement: it pins READ COMMITTED, whatever the
/// server's default, so that what follows sees what the holder before
/// committed (under REPEATABLE READ the snapshot would date from before
/// the wait, and the lock would order nothing).
pub(crate) async fn lock_across_instances(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    backend: Backend,
    lock: InstanceLock,
) -> Result<(), sqlx::Error> {
    if backend != Backend::Postgres {
        return Ok(());
    }
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut **tx)
        .await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(lock as i64)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Apply pending migrations; refuse a database from a newer build.
pub(crate) async fn migrate(
    pool: &AnyPool,
    backend: Backend,
    clock: &Arc<Clock>,
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
    let current: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM zm_schema_migrations")
        .fetch_one(&mut *tx)
        .await?;
    let current = current.unwrap_or(0);
    let known = latest_schema_version();
    if current > known {
        tx.rollback().await?;
        return Err(OpenError::TooNew {
            found: current,
            known,
        });
    }
    for m in MIGRATIONS.iter().filter(|m| m.version > current) {
        let sql = match backend {
            Backend::Sqlite => m.sqlite,
            Backend::Postgres => m.postgres,
        };
        // Debug, not info: `stdio` opens the database on every client start
        // and keeps stderr quiet.
        tracing::debug!(target: "zm_store", version = m.version, name = m.name, "applying migration");
        tx.execute(sqlx::raw_sql(sqlx::AssertSqlSafe(sql))).await?;
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
    Ok(known.max(current))
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
mod tests {
    use super::*;
    use std::path::PathBuf;

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
    }
}
