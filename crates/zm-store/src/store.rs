//! The store handle and the caller context.

use std::sync::Arc;

use sqlx::{Any, AnyPool, Transaction};
use zm_contracts::ToolError;

use crate::clock::Clock;
use crate::db::{self, Backend, DbResult, OpenError, OpenOptions};

/// Who is calling. Always built from authentication and the transport,
/// never from tool input.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The authenticated user (`usr_…`).
    pub user_id: String,
    /// The MCP client's name (`clientInfo.name`), when known.
    pub agent_name: Option<String>,
    /// The transport session id (`ses_…`), when the transport has sessions.
    pub session_id: Option<String>,
    /// The project scope this connection is attached to, if any.
    pub attached_project: Option<String>,
    /// The request id, for the audit log.
    pub request_id: Option<String>,
}

impl Caller {
    pub fn new(user_id: impl Into<String>) -> Self {
        Caller {
            user_id: user_id.into(),
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
        db::migrate(&pool, backend, &clock).await?;
        Ok(Store {
            pool,
            backend,
            clock,
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The store's clock (tests advance it).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// A write transaction (`BEGIN IMMEDIATE` on SQLite so writers queue on
    /// the busy timeout instead of failing on lock upgrade).
    pub(crate) async fn write_tx(&self) -> Result<Transaction<'static, Any>, ToolError> {
        let begin = match self.backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN",
        };
        self.pool.begin_with(begin).await.db("begin transaction")
    }

    /// Is the database reachable?
    pub async fn ping(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.pool).await.is_ok()
    }

    /// Close the pool (waits for connections to be returned).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Row counts of every table (for the behavioural annotation check and
    /// consistency probes).
    pub async fn table_fingerprint(&self) -> Result<Vec<(String, String)>, ToolError> {
        let mut out = Vec::new();
        for (table, cols) in crate::FINGERPRINT_TABLES {
            let sql = format!("SELECT {cols} FROM {table} ORDER BY 1");
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .fetch_all(&self.pool)
                .await
                .db("fingerprint")?;
            let mut digest = String::new();
            for row in rows {
                use sqlx::Row;
                for i in 0..sqlx::Row::len(&row) {
                    let v: Option<String> = row
                        .try_get::<Option<String>, _>(i)
                        .ok()
                        .flatten()
                        .or_else(|| {
                            row.try_get::<Option<i64>, _>(i)
                                .ok()
                                .flatten()
                                .map(|v| v.to_string())
                        })
                        .or_else(|| {
                            row.try_get::<Option<f64>, _>(i)
                                .ok()
                                .flatten()
                                .map(|v| v.to_string())
                        });
                    digest.push_str(v.as_deref().unwrap_or("∅"));
                    digest.push('|');
                }
                digest.push('\n');
            }
            out.push((table.to_string(), digest));
        }
        Ok(out)
    }
}
