//! Copying a whole database into an empty one, from either backend to
//! either (`zero-memory copy --to URL`): how an installation that grew
//! moves from SQLite to PostgreSQL, or back, with everything it holds —
//! users, tokens, OAuth clients, teams, memories (retired ones too) with
//! their scopes, history, links, entities, conflicts and rules, the audit
//! log, the stored vectors, and the server's keys (so signed thread tokens
//! and export cursors stay valid).
//!
//! The source is read in one snapshot (a read transaction; REPEATABLE
//! READ on PostgreSQL) and the destination written in one transaction:
//! a copy that fails leaves no row in the destination (the empty schema
//! its migrations made, committed before, stays: a second copy runs into
//! it as into any empty database).

use futures_util::TryStreamExt;
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, AssertSqlSafe, Connection, Row};

use crate::db::{self, Backend, OpenError, OpenOptions};
use crate::store::Store;

/// Every table a copy carries, in the order the migrations create them:
/// a table's foreign keys point only to tables before it.
pub const COPIED_TABLES: &[&str] = &[
    "users",
    "access_tokens",
    "scopes",
    "scope_members",
    "project_bindings",
    "memories",
    "memory_links",
    "entities",
    "memory_entities",
    "edges",
    "conflicts",
    "rules",
    "imports",
    "audit_log",
    "oauth_clients",
    "oauth_grants",
    "oauth_codes",
    "oauth_families",
    "server_secrets",
    "rate_windows",
    "login_failures",
    "mcp_sessions",
    "teams",
    "team_projects",
    "team_invitations",
    "team_events",
    "team_export_grants",
    "web_sessions",
    "memory_usage",
    "recall_activity",
    "memory_vectors",
];

/// Tables a copy leaves to the destination: its migration ledger, the
/// storage totals its triggers compute from the memories as they arrive,
/// the source's embedders' short claims (the destination's embedder
/// makes its own), and SQLite's count of deleted memories (a destination's
/// own, from zero).
pub const DERIVED_TABLES: &[&str] = &[
    "zm_schema_migrations",
    "storage_usage",
    "embedding_claims",
    "memory_deletions",
];

/// Tables of older schemas that a later migration drops: an empty
/// database of an older release is still ours, not another application's.
const FORMER_TABLES: &[&str] = &["session_threads"];

/// Tables a destination may hold rows of and still count as empty (the
/// copy replaces them): the keys a server makes at its first open, and
/// the rate-limit windows and sign-in failures of a server that ran with
/// no account.
const REPLACED_TABLES: &[&str] = &["server_secrets", "rate_windows", "login_failures"];

/// Columns numbered anew by the destination: the vector index reads new
/// vectors by this number, which PostgreSQL hands out itself.
const RENUMBERED: &[(&str, &str)] = &[("memory_vectors", "vseq")];

/// What a copy wrote: rows per table, in copy order.
#[derive(Debug, Clone, Default)]
pub struct CopyReport {
    pub tables: Vec<(&'static str, u64)>,
}

impl CopyReport {
    /// Rows copied into `table`.
    pub fn rows(&self, table: &str) -> u64 {
        self.tables
            .iter()
            .find(|(t, _)| *t == table)
            .map_or(0, |(_, n)| *n)
    }
}

/// Why a copy did not happen. Operator errors: they never reach a client.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The destination holds data: a row in one of our tables, or a
    /// table that is not ours (another application's database).
    #[error("the destination already holds data (table {0}): copy into a new, empty database")]
    NotEmpty(String),
    #[error("table {table}, column {column}: type {kind:?} cannot be copied")]
    UnknownType {
        table: String,
        column: String,
        kind: String,
    },
    /// The source was written to while it was copied: what was written
    /// meanwhile is not in the snapshot the copy read, so nothing was
    /// kept (the destination is as empty as before).
    #[error(
        "the source changed during the copy (a server or an agent's `stdio` wrote to it): nothing was copied; stop every process using the source and copy again"
    )]
    SourceChanged,
    /// A text value of the SQLite source holds a NUL character, which
    /// PostgreSQL cannot store: the row is named so it can be mended.
    #[error(
        "table {table}, column {column}, row {row}: the text holds a NUL character, which PostgreSQL cannot store; edit or forget it on the source and copy again (nothing was copied)"
    )]
    Nul {
        table: &'static str,
        column: String,
        row: String,
    },
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    /// A table's rows failed to read or write: which table says where to
    /// look (a value the destination refuses, say).
    #[error("copying table {table}: {source}")]
    Table {
        table: &'static str,
        source: sqlx::Error,
    },
}

/// How a column's values are read and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Real,
    Text,
    Bytes,
}

impl Kind {
    /// From a declared SQLite type or a PostgreSQL `data_type`.
    fn of(declared: &str) -> Option<Kind> {
        let d = declared.to_ascii_lowercase();
        if d.contains("int") {
            Some(Kind::Int)
        } else if d.contains("real") || d.contains("double") || d.contains("float") {
            Some(Kind::Real)
        } else if d.contains("text") || d.contains("char") {
            Some(Kind::Text)
        } else if d.contains("blob") || d.contains("bytea") {
            Some(Kind::Bytes)
        } else {
            None
        }
    }
}

/// A column as the schema declares it.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    pub name: String,
    declared: String,
    /// Computed by the database (PostgreSQL's generated `tsvector`, an
    /// identity always generated): never written.
    generated: bool,
}

/// Every table of the schema, by name (the full-text index's own tables
/// aside: triggers derive them from `memories`).
pub(crate) async fn table_names(
    conn: &mut AnyConnection,
    backend: Backend,
) -> Result<Vec<String>, sqlx::Error> {
    let sql = match backend {
        Backend::Sqlite => {
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'memories_fts%' ORDER BY name"
        }
        Backend::Postgres => {
            "SELECT CAST(table_name AS TEXT) FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name"
        }
    };
    sqlx::query_scalar(sql).fetch_all(conn).await
}

/// A table's columns in declaration order.
pub(crate) async fn columns(
    conn: &mut AnyConnection,
    backend: Backend,
    table: &str,
) -> Result<Vec<Column>, sqlx::Error> {
    let sql = match backend {
        Backend::Sqlite => {
            "SELECT name AS n, type AS t, 'NO' AS g, '' AS i FROM pragma_table_info($1) ORDER BY cid"
        }
        Backend::Postgres => {
            "SELECT CAST(column_name AS TEXT) AS n, CAST(data_type AS TEXT) AS t, CAST(is_generated AS TEXT) AS g, \
             CAST(COALESCE(identity_generation, '') AS TEXT) AS i \
             FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position"
        }
    };
    let rows = sqlx::query(sql).bind(table).fetch_all(conn).await?;
    rows.iter()
        .map(|r| {
            Ok(Column {
                name: r.try_get("n")?,
                declared: r.try_get("t")?,
                generated: r.try_get::<String, _>("g")? == "ALWAYS"
                    || r.try_get::<String, _>("i")? == "ALWAYS",
            })
        })
        .collect()
}

/// One value read from the source.
enum Value {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<String>),
    Bytes(Option<Vec<u8>>),
}

fn read(row: &AnyRow, i: usize, kind: Kind) -> Result<Value, sqlx::Error> {
    Ok(match kind {
        Kind::Int => Value::Int(row.try_get(i)?),
        Kind::Real => Value::Real(row.try_get(i)?),
        Kind::Text => Value::Text(row.try_get(i)?),
        Kind::Bytes => Value::Bytes(row.try_get(i)?),
    })
}

/// Bound values per insert statement at most (both backends take many
/// more; this keeps one statement's text and arguments small).
const VALUES_PER_INSERT: usize = 4_000;

impl Store {
    /// Copy this database, all of it, into the empty database `to` (which
    /// is created and migrated to this build's schema first). Refused when
    /// the destination holds data (this database itself does, unless it
    /// holds nothing to copy).
    pub async fn copy_into(&self, to: &OpenOptions) -> Result<CopyReport, CopyError> {
        // A SQLite file is looked at on a plain connection first: opening
        // it the store's way turns on its write-ahead log, a change to the
        // file (another application's database named by mistake is left
        // as it was).
        if let Some(path) = db::sqlite_path(&to.url)
            && path.exists()
        {
            sqlx::any::install_default_drivers();
            let mut conn = AnyConnection::connect(&to.url)
                .await
                .map_err(OpenError::from)?;
            let held = refuse_held(&mut conn, Backend::Sqlite).await;
            conn.close().await?;
            held?;
        }
        let (dest, backend) = db::connect(to).await?;
        let result = self.copy_to_pool(&dest, backend).await;
        dest.close().await;
        result
    }

    async fn copy_to_pool(
        &self,
        dest: &sqlx::AnyPool,
        backend: Backend,
    ) -> Result<CopyReport, CopyError> {
        self.copy_to_pool_with(dest, backend, None).await
    }

    /// [`Self::copy_to_pool`], running `during` (tests: a write to the
    /// source) once the source's snapshot is taken.
    async fn copy_to_pool_with(
        &self,
        dest: &sqlx::AnyPool,
        backend: Backend,
        during: Option<futures_util::future::BoxFuture<'static, ()>>,
    ) -> Result<CopyReport, CopyError> {
        // A destination holding data is refused before anything is written
        // to it, its schema included (a working database of an older
        // release named by mistake stays as its release left it). The
        // check is made again in the copy's transaction.
        {
            let mut conn = dest.acquire().await?;
            refuse_held(&mut conn, backend).await?;
        }
        db::migrate(dest, backend, &self.clock, true).await?;
        // The source in one snapshot.
        let mut src = self.read_snapshot().await?;
        let mut dst = match backend {
            Backend::Sqlite => dest.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => dest.begin().await?,
        };
        if backend == Backend::Postgres {
            // A server already pointed at the new database (an agent's
            // `stdio`) that found no user would make its own owner beside
            // the copied one: it waits for the copy, as SQLite's `BEGIN
            // IMMEDIATE` makes it wait, and then finds the copied users.
            db::lock_across_instances(&mut dst, backend, db::InstanceLock::UserCreation).await?;
        }
        // Each side waits on the other (a table read whole, then written):
        // neither is an abandoned transaction, however long that takes.
        const NO_IDLE_LIMIT: &str = "SET LOCAL idle_in_transaction_session_timeout = 0";
        if self.backend == Backend::Postgres {
            sqlx::query(NO_IDLE_LIMIT).execute(&mut *src).await?;
        }
        if backend == Backend::Postgres {
            sqlx::query(NO_IDLE_LIMIT).execute(&mut *dst).await?;
        }
        for table in COPIED_TABLES {
            if REPLACED_TABLES.contains(table) {
                sqlx::query(AssertSqlSafe(format!("DELETE FROM {table}")))
                    .execute(&mut *dst)
                    .await?;
                continue;
            }
            holds_rows(&mut dst, table).await?;
        }
        let mut totals_after = false;
        if backend == Backend::Postgres {
            // The storage totals' row trigger would update one user's row
            // once per memory, in this one transaction, where each update
            // walks past every earlier version of that row: quadratic in a
            // user's memories (27 s for 40,000, hours for a million). Off
            // for the copy (only this transaction sees that: DDL is
            // transactional), the totals counted once after it.
            // Only the table's owner may: a role with rights on tables
            // another role made (a DBA's `migrate`) keeps the trigger on,
            // slower but exact.
            sqlx::query("SAVEPOINT zm_usage_trigger")
                .execute(&mut *dst)
                .await?;
            match sqlx::query("ALTER TABLE memories DISABLE TRIGGER memories_usage")
                .execute(&mut *dst)
                .await
            {
                Ok(_) => totals_after = true,
                Err(e) => {
                    tracing::warn!(target: "zm_store", error = %e, "copy: the storage totals' trigger stays on (this role does not own the table); the copy is slower");
                    sqlx::query("ROLLBACK TO SAVEPOINT zm_usage_trigger")
                        .execute(&mut *dst)
                        .await?;
                }
            }
        }
        // What the snapshot holds of the writes that matter, taken in it
        // (on SQLite its first read starts the snapshot), to compare with
        // the source as it stands once every row is read.
        let before = writes_seen(&mut src).await?;
        if let Some(during) = during {
            during.await;
        }
        let mut report = CopyReport::default();
        for table in COPIED_TABLES {
            let n = copy_table(&mut src, self.backend, &mut dst, backend, table)
                .await
                .map_err(|e| match e {
                    CopyError::Db(source) => CopyError::Table { table, source },
                    other => other,
                })?;
            report.tables.push((table, n));
        }
        if backend == Backend::Postgres {
            // `memories.seq` came with its values; the next one follows them.
            sqlx::query(
                "SELECT setval(pg_get_serial_sequence('memories', 'seq'), (SELECT COALESCE(MAX(seq), 0) + 1 FROM memories), false)",
            )
            .execute(&mut *dst)
            .await?;
        }
        if totals_after {
            // What the trigger would have summed (migration 5's count).
            sqlx::query(
                "INSERT INTO storage_usage (user_id, memories, bytes) \
                 SELECT owner_id, COUNT(*), SUM(octet_length(content) + COALESCE(octet_length(source), 0)) \
                 FROM memories GROUP BY owner_id",
            )
            .execute(&mut *dst)
            .await?;
            sqlx::query("ALTER TABLE memories ENABLE TRIGGER memories_usage")
                .execute(&mut *dst)
                .await?;
        }
        // A write committed to the source since the snapshot (a server or
        // an agent's `stdio` still running on it) would be acknowledged
        // there and missing here: the copy is not kept. (One landing
        // between this look and the commit is not caught: stopping every
        // process first, as the command says, is what guarantees it.)
        let now = {
            let mut conn = self.pool.acquire().await?;
            writes_seen(&mut conn).await?
        };
        if now != before {
            return Err(CopyError::SourceChanged);
        }
        dst.commit().await?;
        // The copy is whole once committed: a source that then fails to end
        // its read (a connection cut) is no failed copy. Reported as one, a
        // retry would be refused (the destination holds data) and a good
        // database dropped.
        if let Err(e) = src.rollback().await {
            tracing::warn!(target: "zm_store", error = %e, "ending the source's read after the copy failed");
        }
        if backend == Backend::Postgres {
            // The planner's statistics of what was just loaded, before the
            // first query plans blind (autovacuum would come to it later;
            // with autovacuum off on PostgreSQL 13 nothing would). Only our
            // tables: the database may hold others. A failure is logged,
            // the copy is done.
            let analyze = format!("ANALYZE {}", COPIED_TABLES.join(", "));
            if let Err(e) = sqlx::query(AssertSqlSafe(analyze)).execute(dest).await {
                tracing::warn!(target: "zm_store", error = %e, "ANALYZE after the copy failed");
            }
        }
        Ok(report)
    }
}

/// A fingerprint of the writes a copy must not miss: memories written,
/// retired or restored, accounts, live tokens, team changes and every
/// audited command. (Vectors, rate windows, sessions and usage counts a
/// running server also writes are not in it: a copy without them loses
/// nothing the destination does not rebuild.)
async fn writes_seen(conn: &mut AnyConnection) -> Result<Vec<i64>, sqlx::Error> {
    let row = sqlx::query(
        "SELECT (SELECT COUNT(*) FROM audit_log) AS audited, \
                (SELECT COALESCE(MAX(seq), 0) FROM memories) AS newest, \
                (SELECT COUNT(*) FROM memories WHERE invalidated_at IS NOT NULL) AS retired, \
                (SELECT COUNT(*) FROM users) AS users, \
                (SELECT COUNT(*) FROM access_tokens WHERE revoked_at IS NULL) AS tokens, \
                (SELECT COUNT(*) FROM team_events) AS team_events",
    )
    .fetch_one(conn)
    .await?;
    [
        "audited",
        "newest",
        "retired",
        "users",
        "tokens",
        "team_events",
    ]
    .iter()
    .map(|c| row.try_get::<i64, _>(*c))
    .collect()
}

/// `NotEmpty` when the destination holds data: a table that is not ours
/// (another application's, empty or not), or a row in one of ours (the
/// tables a copy replaces aside).
async fn refuse_held(conn: &mut AnyConnection, backend: Backend) -> Result<(), CopyError> {
    let present = table_names(&mut *conn, backend).await?;
    // A database a newer release made (empty or not) holds tables this
    // build does not know: said as such, not as "holds data".
    if present.iter().any(|t| t == "zm_schema_migrations") {
        db::schema_version_known(&mut *conn).await?;
    }
    let ours = |t: &str| {
        COPIED_TABLES.contains(&t) || DERIVED_TABLES.contains(&t) || FORMER_TABLES.contains(&t)
    };
    if let Some(foreign) = present.iter().find(|t| !ours(t.as_str())) {
        return Err(CopyError::NotEmpty(foreign.clone()));
    }
    for table in COPIED_TABLES {
        if present.iter().any(|t| t == table) {
            holds_rows(&mut *conn, table).await?;
        }
    }
    Ok(())
}

/// `NotEmpty` when `table` has a row (the tables a copy replaces aside).
async fn holds_rows(conn: &mut AnyConnection, table: &str) -> Result<(), CopyError> {
    if REPLACED_TABLES.contains(&table) {
        return Ok(());
    }
    let sql = format!("SELECT 1 FROM {table} LIMIT 1");
    match sqlx::query(AssertSqlSafe(sql)).fetch_optional(conn).await? {
        Some(_) => Err(CopyError::NotEmpty(table.to_string())),
        None => Ok(()),
    }
}

/// Copy one table's rows (the columns both sides have, but those the
/// destination computes or numbers itself); how many. The rows stream
/// from the source and are written a statement's worth at a time: a table
/// of millions of rows is never held whole.
async fn copy_table(
    src: &mut AnyConnection,
    src_backend: Backend,
    dst: &mut AnyConnection,
    dst_backend: Backend,
    table: &'static str,
) -> Result<u64, CopyError> {
    let theirs = columns(&mut *dst, dst_backend, table).await?;
    let mut cols: Vec<(String, Kind)> = Vec::new();
    for c in columns(&mut *src, src_backend, table).await? {
        let Some(target) = theirs.iter().find(|t| t.name == c.name) else {
            continue;
        };
        if c.generated || target.generated || RENUMBERED.contains(&(table, c.name.as_str())) {
            continue;
        }
        let kind = Kind::of(&c.declared).ok_or_else(|| CopyError::UnknownType {
            table: table.to_string(),
            column: c.name.clone(),
            kind: c.declared.clone(),
        })?;
        cols.push((c.name, kind));
    }
    let names = cols
        .iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let per_insert = (VALUES_PER_INSERT / cols.len().max(1)).max(1);
    let mut rows = sqlx::query(AssertSqlSafe(format!("SELECT {names} FROM {table}"))).fetch(src);
    let (mut chunk, mut bytes, mut copied) = (Vec::with_capacity(per_insert), 0usize, 0u64);
    while let Some(row) = rows.try_next().await? {
        let values = cols
            .iter()
            .enumerate()
            .map(|(i, (_, kind))| read(&row, i, *kind))
            .collect::<Result<Vec<Value>, sqlx::Error>>()?;
        if dst_backend == Backend::Postgres
            && let Some(at) = values
                .iter()
                .position(|v| matches!(v, Value::Text(Some(t)) if t.contains('\0')))
        {
            // The row by its id where it has one (our tables' keys), else
            // by its place in the table.
            let row = match cols.iter().position(|(n, _)| n == "id").map(|i| &values[i]) {
                Some(Value::Text(Some(id))) => id.clone(),
                Some(Value::Int(Some(id))) => id.to_string(),
                _ => format!("#{}", copied + chunk.len() as u64 + 1),
            };
            return Err(CopyError::Nul {
                table,
                column: cols[at].0.clone(),
                row,
            });
        }
        bytes += values.iter().map(Value::size).sum::<usize>();
        chunk.push(values);
        if chunk.len() == per_insert || bytes >= BYTES_PER_INSERT {
            copied += chunk.len() as u64;
            insert_rows(&mut *dst, table, &names, std::mem::take(&mut chunk)).await?;
            bytes = 0;
        }
    }
    if !chunk.is_empty() {
        copied += chunk.len() as u64;
        insert_rows(&mut *dst, table, &names, chunk).await?;
    }
    Ok(copied)
}

/// Bytes of text and blobs per insert statement at most (a row may pass
/// it alone): with the text limit raised, a few hundred memories of a
/// million characters each would otherwise make one statement of
/// gigabytes, held more than once. Tests copy under 4 KiB, so that every
/// row-for-row comparison below goes through statements cut by size (the
/// vectors' table alone takes several).
const BYTES_PER_INSERT: usize = if cfg!(test) { 4 << 10 } else { 16 << 20 };

impl Value {
    /// The bytes a value holds beyond its fixed size.
    fn size(&self) -> usize {
        match self {
            Value::Text(Some(t)) => t.len(),
            Value::Bytes(Some(b)) => b.len(),
            _ => 8,
        }
    }
}

/// One multi-row `INSERT` of `rows` (their values in `names`' order)
/// into `table`.
async fn insert_rows(
    dst: &mut AnyConnection,
    table: &str,
    names: &str,
    rows: Vec<Vec<Value>>,
) -> Result<(), CopyError> {
    let mut sql = format!("INSERT INTO {table} ({names}) VALUES ");
    let mut n = 0;
    for (r, row) in rows.iter().enumerate() {
        sql.push_str(if r == 0 { "(" } else { ", (" });
        for i in 0..row.len() {
            if i > 0 {
                sql.push_str(", ");
            }
            n += 1;
            sql.push_str(&format!("${n}"));
        }
        sql.push(')');
    }
    let mut q = sqlx::query(AssertSqlSafe(sql));
    for v in rows.into_iter().flatten() {
        q = match v {
            Value::Int(v) => q.bind(v),
            Value::Real(v) => q.bind(v),
            Value::Text(v) => q.bind(v),
            Value::Bytes(v) => q.bind(v),
        };
    }
    q.execute(dst).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value as Json, json};
    use zm_contracts::ToolName;

    use super::*;
    use crate::{Caller, ToolService};

    /// Every row of a copied table, over the columns a copy carries, as
    /// canonical text, sorted.
    async fn dump(pool: &sqlx::AnyPool, backend: Backend, table: &'static str) -> Vec<String> {
        let mut conn = pool.acquire().await.unwrap();
        let cols: Vec<(String, Kind)> = columns(&mut conn, backend, table)
            .await
            .unwrap()
            .into_iter()
            .filter(|c| !c.generated && !RENUMBERED.contains(&(table, c.name.as_str())))
            .filter(|c| !(table == "memories" && c.name == "fts"))
            .map(|c| (c.name, Kind::of(&c.declared).unwrap()))
            .collect();
        let names = cols
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let rows = sqlx::query(AssertSqlSafe(format!("SELECT {names} FROM {table}")))
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        let mut out: Vec<String> = rows
            .iter()
            .map(|r| {
                cols.iter()
                    .enumerate()
                    .map(|(i, (n, k))| match read(r, i, *k).unwrap() {
                        Value::Int(v) => format!("{n}={v:?}"),
                        Value::Real(v) => format!("{n}={v:?}"),
                        Value::Text(v) => format!("{n}={v:?}"),
                        Value::Bytes(v) => format!("{n}={v:?}"),
                    })
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect();
        out.sort();
        out
    }

    async fn call(store: &Store, caller: &Caller, tool: &str, args: Json) -> Json {
        ToolService::new(store.clone())
            .call(caller, ToolName::parse(tool).unwrap(), &args)
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e}"))
            .to_json()
    }

    /// A store holding a bit of everything: two users, a token, a team,
    /// memories in three scopes (one retired, one superseded), entities,
    /// links, a conflict, a rule, vectors.
    async fn populated() -> (tempfile::TempDir, Store, String) {
        let (dir, store) = crate::testing::sqlite_store().await;
        let a = crate::testing::test_caller(&store, "copy-a").await;
        let b = crate::testing::test_caller(&store, "copy-b").await;
        let (_, token) = store
            .create_token(
                &a.user_id,
                Some("laptop"),
                &[crate::SCOPE_READ, crate::SCOPE_WRITE],
            )
            .await
            .unwrap();
        let team = zm_contracts::teams::CreateTeamInput {
            slug: "infra".into(),
            name: Some("Infra".into()),
        };
        store.create_team(&a, team).await.unwrap();
        let first = call(&store, &a, "remember", json!({"content": "Billing runs on PostgreSQL sixteen.", "kind": "fact", "scope": "personal", "entities": [{"name": "Café"}, {"name": "Billing"}]})).await;
        let first = first["memory_id"].as_str().unwrap().to_string();
        call(&store, &a, "remember", json!({"content": "Billing moved to PostgreSQL seventeen.", "kind": "fact", "scope": "personal", "links": [{"dst": first, "type": "supersedes"}]})).await;
        let team_note = call(&store, &a, "remember", json!({"content": "The infra team deploys on Tuesdays.", "kind": "convention", "scope": "team.infra"})).await;
        let team_note = team_note["memory_id"].as_str().unwrap().to_string();
        call(&store, &a, "promote_rule", json!({"memory_id": team_note})).await;
        let x = call(&store, &a, "remember", json!({"content": "Cache entries live five minutes.", "kind": "fact", "scope": "personal"})).await;
        let y = call(
            &store,
            &a,
            "remember",
            json!({"content": "Cache entries live one hour.", "kind": "fact", "scope": "personal"}),
        )
        .await;
        call(
            &store,
            &a,
            "link",
            json!({"src": x["memory_id"], "dst": y["memory_id"], "type": "contradicts"}),
        )
        .await;
        call(
            &store,
            &a,
            "link",
            json!({"src": "Billing", "dst": "PostgreSQL", "type": "depends_on"}),
        )
        .await;
        let gone = call(
            &store,
            &b,
            "remember",
            json!({"content": "A note b forgets.", "kind": "episode", "scope": "personal"}),
        )
        .await;
        call(
            &store,
            &b,
            "forget",
            json!({"memory_id": gone["memory_id"], "reason": "wrong"}),
        )
        .await;
        if let Some(Ok(model)) = zm_embed::bundled() {
            store.set_encoder(Arc::clone(&model));
            while store.embed_pending(64).await.unwrap() > 0 {}
        }
        (dir, store, token)
    }

    async fn same_rows(from: &Store, to: &sqlx::AnyPool, to_backend: Backend, what: &str) {
        for table in COPIED_TABLES {
            let (a, b) = (
                dump(&from.pool, from.backend, table).await,
                dump(to, to_backend, table).await,
            );
            assert_eq!(a, b, "[{what}] table {table} copied row for row");
        }
    }

    /// A copy carries every row of every table and works as the source
    /// did (a token authenticates, recall finds by word; the server's keys
    /// are among the rows); it refuses a destination that holds data, and itself.
    async fn copy_and_check(from: &Store, to: &OpenOptions, token: &str, what: &str) {
        let report = from
            .copy_into(to)
            .await
            .unwrap_or_else(|e| panic!("[{what}] copy: {e}"));
        assert!(
            report.rows("memories") >= 6 && report.rows("users") >= 2,
            "[{what}] {report:?}"
        );
        if zm_embed::bundled().is_some() {
            assert!(
                report.rows("memory_vectors") > 0,
                "[{what}] the vectors came along: {report:?}"
            );
        }
        let copy = Store::open_with(to.clone()).await.unwrap();
        same_rows(from, &copy.pool, copy.backend, what).await;
        if copy.backend == Backend::Postgres {
            // Analysed by the copy (never analysed reads -1).
            let reltuples: i64 = sqlx::query_scalar(
                "SELECT CAST(reltuples AS BIGINT) FROM pg_class WHERE oid = to_regclass('memories')",
            )
            .fetch_one(&copy.pool)
            .await
            .unwrap();
            assert!(
                reltuples >= 6,
                "[{what}] the copy analysed its memories: {reltuples}"
            );
        }
        let who = copy
            .authenticate(token)
            .await
            .unwrap()
            .expect("the token authenticates in the copy");
        let caller = Caller::new(who.user_id);
        let hits = call(
            &copy,
            &caller,
            "recall",
            json!({"query": "PostgreSQL seventeen"}),
        )
        .await;
        assert_eq!(
            hits["memories"][0]["content"], "Billing moved to PostgreSQL seventeen.",
            "[{what}] recall in the copy: {hits}"
        );
        let again = from.copy_into(to).await;
        assert!(
            matches!(again, Err(CopyError::NotEmpty(_))),
            "[{what}] a second copy is refused: {again:?}"
        );
        copy.close().await;
    }

    #[tokio::test]
    async fn copies_everything_across_backends() {
        let (dir, source, token) = populated().await;
        let scratch = tempfile::tempdir().unwrap();
        let to = OpenOptions::new(crate::sqlite_url(&scratch.path().join("copy.db")));
        copy_and_check(&source, &to, &token, "sqlite to sqlite").await;
        let itself = source
            .copy_into(&OpenOptions::new(crate::sqlite_url(
                &dir.path().join("zm.db"),
            )))
            .await;
        assert!(matches!(itself, Err(CopyError::NotEmpty(_))), "{itself:?}");

        let Some((admin, name, pg_url)) = scratch_postgres("copy").await else {
            eprintln!("ZM_TEST_DATABASE_URL is not set: the PostgreSQL copies were skipped");
            return;
        };
        let pg = OpenOptions::new(pg_url);
        // Every write to the storage totals counted: the copy writes each
        // user's row once, not once per memory (quadratic in one
        // transaction). A sequence and a function are no tables: the
        // destination still counts as empty.
        let fresh = Store::open_with(pg.clone()).await.unwrap();
        for ddl in [
            "CREATE SEQUENCE usage_writes",
            "CREATE FUNCTION count_usage_writes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM nextval('usage_writes'); RETURN NULL; END; $$",
            "CREATE TRIGGER count_usage_writes AFTER INSERT OR UPDATE ON storage_usage FOR EACH ROW EXECUTE FUNCTION count_usage_writes()",
        ] {
            sqlx::query(ddl).execute(&fresh.pool).await.unwrap();
        }
        fresh.close().await;
        copy_and_check(&source, &pg, &token, "sqlite to postgres").await;
        let pg_store = Store::open_with(pg.clone()).await.unwrap();
        let writes: i64 = sqlx::query_scalar(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM usage_writes",
        )
        .fetch_one(&pg_store.pool)
        .await
        .unwrap();
        let owners: i64 = sqlx::query_scalar("SELECT COUNT(DISTINCT owner_id) FROM memories")
            .fetch_one(&pg_store.pool)
            .await
            .unwrap();
        assert_eq!(writes, owners, "one write per user's totals");
        assert_eq!(
            dump(&pg_store.pool, Backend::Postgres, "storage_usage").await,
            dump(&source.pool, Backend::Sqlite, "storage_usage").await,
            "the totals as the source's triggers kept them"
        );
        let enabled: String = sqlx::query_scalar(
            "SELECT CAST(tgenabled AS TEXT) FROM pg_trigger WHERE tgname = 'memories_usage'",
        )
        .fetch_one(&pg_store.pool)
        .await
        .unwrap();
        assert_eq!(enabled, "O", "the totals' trigger is on again");
        let back = OpenOptions::new(crate::sqlite_url(&scratch.path().join("back.db")));
        copy_and_check(&pg_store, &back, &token, "postgres to sqlite").await;
        pg_store.close().await;
        sqlx::query(AssertSqlSafe(format!("DROP DATABASE {name}")))
            .execute(&admin)
            .await
            .unwrap();
    }

    /// A destination holding data on an older schema (a working database
    /// named by mistake) is refused before anything is written to it: its
    /// schema is not migrated.
    #[tokio::test]
    async fn a_full_destination_is_refused_before_its_migration() {
        let (_dir, source, _) = populated().await;
        let (_other, full) = crate::testing::sqlite_store().await;
        crate::testing::test_caller(&full, "someone").await;
        sqlx::query("DELETE FROM zm_schema_migrations WHERE version = $1")
            .bind(db::latest_schema_version())
            .execute(&full.pool)
            .await
            .unwrap();
        let url = crate::sqlite_url(&_other.path().join("zm.db"));
        let refused = source.copy_into(&OpenOptions::new(url)).await;
        assert!(
            matches!(refused, Err(CopyError::NotEmpty(ref t)) if t == "users"),
            "{refused:?}"
        );
        let version: i64 = sqlx::query_scalar("SELECT MAX(version) FROM zm_schema_migrations")
            .fetch_one(&full.pool)
            .await
            .unwrap();
        assert_eq!(version, db::latest_schema_version() - 1, "not migrated");
    }

    /// An empty database a newer release made (its schema version above
    /// this build's, a table this build does not know) is refused as too
    /// new, not as holding data, and left as it was.
    #[tokio::test]
    async fn a_destination_of_a_newer_release_is_refused_as_too_new() {
        let (_dir, source, _) = populated().await;
        let scratch = tempfile::tempdir().unwrap();
        let url = crate::sqlite_url(&scratch.path().join("newer.db"));
        sqlx::any::install_default_drivers();
        let mut conn = AnyConnection::connect(&url).await.unwrap();
        let newer = db::latest_schema_version() + 1;
        for sql in [
            "CREATE TABLE zm_schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)".to_string(),
            format!("INSERT INTO zm_schema_migrations VALUES ({newer}, 'later', 0)"),
            "CREATE TABLE a_later_table (x)".to_string(),
        ] {
            sqlx::query(AssertSqlSafe(sql)).execute(&mut conn).await.unwrap();
        }
        conn.close().await.unwrap();
        let refused = source.copy_into(&OpenOptions::new(url.clone())).await;
        assert!(
            matches!(refused, Err(CopyError::Open(OpenError::TooNew { found, .. })) if found == newer),
            "{refused:?}"
        );
        let mut conn = AnyConnection::connect(&url).await.unwrap();
        let version: i64 = sqlx::query_scalar("SELECT MAX(version) FROM zm_schema_migrations")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(version, newer, "left as it was");
    }

    /// A destination holding another application's table (a SQLite file
    /// named by mistake) is refused naming that table, before anything is
    /// written to it: none of our tables is made there, and its journal
    /// mode stays as it was.
    #[tokio::test]
    async fn a_destination_holding_another_applications_table_is_refused() {
        let (_dir, source, _) = populated().await;
        let scratch = tempfile::tempdir().unwrap();
        let url = crate::sqlite_url(&scratch.path().join("notes.db"));
        sqlx::any::install_default_drivers();
        let mut conn = AnyConnection::connect(&url).await.unwrap();
        sqlx::query("CREATE TABLE notes(x)")
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("INSERT INTO notes VALUES(1)")
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();

        let refused = source.copy_into(&OpenOptions::new(url.clone())).await;
        assert!(
            matches!(refused, Err(CopyError::NotEmpty(ref t)) if t == "notes"),
            "{refused:?}"
        );
        let message = refused.unwrap_err().to_string();
        assert!(
            message.contains("already holds data") && message.contains("notes"),
            "{message}"
        );
        let mut conn = AnyConnection::connect(&url).await.unwrap();
        let tables: Vec<String> =
            sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                .fetch_all(&mut conn)
                .await
                .unwrap();
        assert_eq!(tables, ["notes"], "nothing of ours was made");
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(mode.to_lowercase(), "delete", "not switched to WAL");
        conn.close().await.unwrap();
    }

    /// Every table of the schema is either copied or derived by the
    /// destination: a table a migration adds cannot be forgotten here.
    /// A row the destination refuses fails the copy naming its table, and
    /// leaves no row behind (here a trigger refuses every memory).
    #[tokio::test]
    async fn a_refused_row_names_its_table_and_leaves_nothing() {
        let (_dir, source, _) = populated().await;
        let (other, dest) = crate::testing::sqlite_store().await;
        sqlx::query(
            "CREATE TRIGGER refuse_memories BEFORE INSERT ON memories BEGIN SELECT RAISE(ABORT, 'refused here'); END",
        )
        .execute(&dest.pool)
        .await
        .unwrap();
        let url = crate::sqlite_url(&other.path().join("zm.db"));
        let failed = source.copy_into(&OpenOptions::new(url)).await;
        match &failed {
            Err(
                e @ CopyError::Table {
                    table: "memories", ..
                },
            ) => {
                assert!(e.to_string().starts_with("copying table memories:"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        let users: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&dest.pool)
            .await
            .unwrap();
        assert_eq!(users, 0, "rolled back");
    }

    /// A write committed to the source while it is copied (a server
    /// still running on it) fails the copy, and leaves the destination
    /// empty: a second copy, with nothing writing, succeeds.
    #[tokio::test]
    async fn a_write_to_the_source_during_the_copy_fails_it() {
        let (_dir, source, _) = populated().await;
        let scratch = tempfile::tempdir().unwrap();
        let url = crate::sqlite_url(&scratch.path().join("copy.db"));
        let writer = source.clone();
        let hook: futures_util::future::BoxFuture<'static, ()> = Box::pin(async move {
            let caller = crate::testing::test_caller(&writer, "copy-late").await;
            call(&writer, &caller, "remember", json!({"content": "Written while the copy ran.", "kind": "fact", "scope": "personal"})).await;
        });
        let (dest, backend) = db::connect(&OpenOptions::new(url.clone())).await.unwrap();
        let failed = source.copy_to_pool_with(&dest, backend, Some(hook)).await;
        assert!(
            matches!(failed, Err(CopyError::SourceChanged)),
            "{failed:?}"
        );
        let users: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&dest)
            .await
            .unwrap();
        assert_eq!(users, 0, "nothing kept");
        dest.close().await;
        let report = source.copy_into(&OpenOptions::new(url)).await.unwrap();
        assert!(report.rows("memories") >= 7, "{report:?}");
    }

    /// A new PostgreSQL database of its own (a copy needs an empty one),
    /// beside `ZM_TEST_DATABASE_URL`'s: the server's pool, its name, its
    /// URL. Named after the test database, so that CI's clean-up of that
    /// database and those derived from it drops this one too if the test
    /// fails. `None` without PostgreSQL.
    async fn scratch_postgres(tag: &str) -> Option<(sqlx::AnyPool, String, String)> {
        let url = crate::test_database_url()?;
        let (base, params) = url
            .trim()
            .split_once('?')
            .map_or((url.trim(), ""), |(b, p)| (b, p));
        let test_db = &base[base.rfind('/').unwrap() + 1..];
        let stem = if !test_db.is_empty()
            && test_db.len() <= 40
            && test_db
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            test_db
        } else {
            "zm"
        };
        let name = format!(
            "{stem}_{tag}_{}",
            crate::identity::random_secret(8).to_lowercase()
        );
        let admin = sqlx::AnyPool::connect(url.trim()).await.unwrap();
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .unwrap();
        let pg_url = format!(
            "{}/{name}{}",
            &base[..base.rfind('/').unwrap()],
            if params.is_empty() {
                String::new()
            } else {
                format!("?{params}")
            }
        );
        Some((admin, name, pg_url))
    }

    /// A SQLite value holding a NUL character (PostgreSQL's text cannot)
    /// is refused naming its table, column and row, and nothing is kept.
    #[tokio::test]
    async fn a_nul_in_a_sqlite_text_is_named_by_its_row() {
        let (_dir, source, _) = populated().await;
        let Some((admin, name, pg_url)) = scratch_postgres("copynul").await else {
            eprintln!("ZM_TEST_DATABASE_URL is not set: the PostgreSQL copy was skipped");
            return;
        };
        let id: String = sqlx::query_scalar("SELECT id FROM memories ORDER BY seq LIMIT 1")
            .fetch_one(&source.pool)
            .await
            .unwrap();
        sqlx::query(
            "UPDATE memories SET agent_name = 'before' || char(0) || 'after' WHERE id = $1",
        )
        .bind(&id)
        .execute(&source.pool)
        .await
        .unwrap();
        let refused = source.copy_into(&OpenOptions::new(pg_url.clone())).await;
        assert!(
            matches!(&refused, Err(CopyError::Nul { table: "memories", column, row }) if column == "agent_name" && *row == id),
            "{refused:?}"
        );
        let dest = sqlx::AnyPool::connect(&pg_url).await.unwrap();
        let users: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&dest)
            .await
            .unwrap();
        assert_eq!(users, 0, "nothing kept");
        dest.close().await;
        sqlx::query(AssertSqlSafe(format!("DROP DATABASE {name}")))
            .execute(&admin)
            .await
            .unwrap();
    }

    /// A role that may write the tables but does not own them (a DBA ran
    /// the migrations) cannot turn the totals' trigger off: the copy keeps
    /// it on, slower, and the totals are exact all the same.
    #[tokio::test]
    async fn a_role_not_owning_the_tables_copies_with_the_trigger_on() {
        let (_dir, source, token) = populated().await;
        let Some((admin, name, owner_url)) = scratch_postgres("copyrole").await else {
            eprintln!("ZM_TEST_DATABASE_URL is not set: skipped");
            return;
        };
        // The schema, made by the owner's role.
        let owner = Store::open_with(OpenOptions::new(owner_url.clone()))
            .await
            .unwrap();
        let role = format!(
            "zm_writer_{}",
            crate::identity::random_secret(8).to_lowercase()
        );
        for ddl in [
            format!("CREATE ROLE {role} LOGIN"),
            format!("GRANT USAGE, CREATE ON SCHEMA public TO {role}"),
            format!("GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}"),
            format!("GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}"),
        ] {
            sqlx::query(AssertSqlSafe(ddl))
                .execute(&owner.pool)
                .await
                .unwrap();
        }
        owner.close().await;
        // The same database, as that role (trust authentication here).
        let rest = owner_url
            .split_once("://")
            .map(|(_, r)| r.split_once('@').map_or(r, |(_, h)| h))
            .unwrap();
        let as_writer = OpenOptions::new(format!("postgres://{role}@{rest}"));
        let report = source.copy_into(&as_writer).await.expect("the copy");
        assert!(report.rows("memories") >= 6, "{report:?}");
        let copy = Store::open_with(as_writer).await.unwrap();
        assert_eq!(
            dump(&copy.pool, Backend::Postgres, "storage_usage").await,
            dump(&source.pool, Backend::Sqlite, "storage_usage").await,
            "the totals as the trigger kept them"
        );
        assert!(copy.authenticate(&token).await.unwrap().is_some());
        copy.close().await;
        sqlx::query(AssertSqlSafe(format!("DROP DATABASE {name} WITH (FORCE)")))
            .execute(&admin)
            .await
            .unwrap();
        sqlx::query(AssertSqlSafe(format!("DROP ROLE {role}")))
            .execute(&admin)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn every_table_is_copied_or_derived() {
        for (label, _dir, store) in crate::testing::stores().await {
            let mut conn = store.pool.acquire().await.unwrap();
            for table in table_names(&mut conn, store.backend).await.unwrap() {
                assert!(
                    COPIED_TABLES.contains(&table.as_str())
                        || DERIVED_TABLES.contains(&table.as_str()),
                    "[{label}] table {table} is neither copied nor derived (add it to COPIED_TABLES in creation order)"
                );
            }
        }
    }
}
