//! A snapshot of the database, row by row: what the behavioural
//! annotation check and the "read tools write nothing" tests compare.
//!
//! Two views: **every row of every table** (the audit log aside — it
//! records calls, it is not state a call may change), read as text, so a
//! tool that touches any row — a scope, a binding, a token — shows; and
//! the **memory data** keyed by identity ([`FINGERPRINT_TABLES`]), so the
//! check can tell a deletion or an invalidation from an update.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::Row;
use zm_contracts::ToolError;

use crate::db::DbResult;
use crate::store::Store;

/// The tables a fingerprint leaves out: the audit log, and the recall
/// counts (usage statistics, written between calls, not by one).
pub const UNFINGERPRINTED: &[&str] = &["audit_log", "memory_usage", "recall_activity"];

/// The memory data keyed by identity: (table, key expression, state
/// expression).
pub const FINGERPRINT_TABLES: &[(&str, &str, &str)] = &[
    (
        "memories",
        "id",
        "scope || '|' || kind || '|' || visibility || '|' || COALESCE(CAST(invalidated_at AS TEXT), '-') || '|' || COALESCE(superseded_by, '-') || '|' || content",
    ),
    ("memory_links", "src || '|' || dst || '|' || type", "type"),
    ("entities", "id", "scope || '|' || name || '|' || type"),
    (
        "memory_entities",
        "memory_id || '|' || entity_id",
        "entity_id",
    ),
    ("edges", "src || '|' || dst || '|' || type", "type"),
    (
        "conflicts",
        "id",
        "status || '|' || verdict || '|' || COALESCE(resolution, '-') || '|' || COALESCE(winner, '-')",
    ),
    (
        "rules",
        "id",
        "memory_id || '|' || status || '|' || CAST(pinned AS TEXT) || '|' || COALESCE(CAST(promoted_at AS TEXT), '-') || '|' || text",
    ),
    (
        "imports",
        "owner_id || '|' || source_hash",
        "COALESCE(memory_id, '-')",
    ),
];

/// The memory data (table → row key → row state) and every row of every
/// table (table → rows as text).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fingerprint(
    pub BTreeMap<String, BTreeMap<String, String>>,
    pub BTreeMap<String, BTreeSet<String>>,
);

impl Fingerprint {
    /// Tables whose rows differ between `self` and `after`, with how many
    /// rows appeared and disappeared: `(table, added, removed)`.
    pub fn changed_tables(&self, after: &Fingerprint) -> Vec<(String, usize, usize)> {
        let empty = BTreeSet::new();
        let tables: BTreeSet<&String> = self.1.keys().chain(after.1.keys()).collect();
        tables
            .into_iter()
            .filter_map(|t| {
                let a = self.1.get(t).unwrap_or(&empty);
                let b = after.1.get(t).unwrap_or(&empty);
                let added = b.difference(a).count();
                let removed = a.difference(b).count();
                (added + removed > 0).then(|| (t.clone(), added, removed))
            })
            .collect()
    }

    /// Rows present here and missing in `after`, as `table:key`.
    pub fn deleted_in(&self, after: &Fingerprint) -> Vec<String> {
        let mut out = Vec::new();
        for (table, rows) in &self.0 {
            let other = after.0.get(table);
            for key in rows.keys() {
                if other.is_none_or(|o| !o.contains_key(key)) {
                    out.push(format!("{table}:{key}"));
                }
            }
        }
        out
    }

    /// Memories live here and invalidated in `after`, with their kind.
    pub fn invalidated_in(&self, after: &Fingerprint) -> Vec<(String, String)> {
        let (Some(before), Some(later)) = (self.0.get("memories"), after.0.get("memories")) else {
            return Vec::new();
        };
        let field = |state: &str, i: usize| state.split('|').nth(i).unwrap_or("").to_string();
        before
            .iter()
            .filter_map(|(id, state)| {
                let now = later.get(id)?;
                (field(state, 3) == "-" && field(now, 3) != "-")
                    .then(|| (id.clone(), field(state, 1)))
            })
            .collect()
    }
}

impl Store {
    /// Snapshot the database.
    pub async fn fingerprint(&self) -> Result<Fingerprint, ToolError> {
        let mut memory_data = BTreeMap::new();
        for (table, key, state) in FINGERPRINT_TABLES {
            let sql = format!("SELECT {key} AS k, {state} AS s FROM {table}");
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .fetch_all(&self.pool)
                .await
                .db("fingerprint")?;
            let map: BTreeMap<String, String> = rows
                .iter()
                .map(|r| (r.get::<String, _>("k"), r.get::<String, _>("s")))
                .collect();
            memory_data.insert(table.to_string(), map);
        }
        let mut all = BTreeMap::new();
        for table in self.table_names().await? {
            if UNFINGERPRINTED.contains(&table.as_str()) {
                continue;
            }
            let columns = self.column_names(&table).await?;
            // Every column as text (a PostgreSQL tsvector too), NULL as ∅.
            let row_text = columns
                .iter()
                .map(|c| format!("COALESCE(CAST({c} AS TEXT), '∅')"))
                .collect::<Vec<_>>()
                .join(" || '|' || ");
            let sql = format!("SELECT {row_text} FROM {table}");
            let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_all(&self.pool)
                .await
                .db("fingerprint rows")?;
            all.insert(table, rows.into_iter().collect());
        }
        Ok(Fingerprint(memory_data, all))
    }

    /// Every table of the schema (the full-text index's own tables aside).
    async fn table_names(&self) -> Result<Vec<String>, ToolError> {
        let mut conn = self.pool.acquire().await.db("table names")?;
        crate::copy::table_names(&mut conn, self.backend)
            .await
            .db("table names")
    }

    async fn column_names(&self, table: &str) -> Result<Vec<String>, ToolError> {
        let mut conn = self.pool.acquire().await.db("column names")?;
        let columns = crate::copy::columns(&mut conn, self.backend, table)
            .await
            .db("column names")?;
        Ok(columns.into_iter().map(|c| c.name).collect())
    }
}
