//! A snapshot of the memory data, row by row: what the behavioural
//! annotation check and the consistency probes compare.

use std::collections::BTreeMap;

use sqlx::Row;
use zm_contracts::ToolError;

use crate::db::DbResult;
use crate::store::Store;

/// The tables that hold memory data: (table, key expression, state
/// expression). Session threads, project bindings, scopes, tokens and the
/// audit log are operational state, not memory data, and are not compared.
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

/// table → row key → row state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fingerprint(pub BTreeMap<String, BTreeMap<String, String>>);

impl Fingerprint {
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
    /// Snapshot the memory data.
    pub async fn fingerprint(&self) -> Result<Fingerprint, ToolError> {
        let mut out = BTreeMap::new();
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
            out.insert(table.to_string(), map);
        }
        Ok(Fingerprint(out))
    }
}
