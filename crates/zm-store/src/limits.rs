//! What one call and one user may hold: the free-text limit of a write and
//! the per-user storage quotas. The operator sets them ([`Limits`] in
//! [`crate::OpenOptions`]); the store enforces them where the data is
//! written, so every surface gets the same answer.

use zm_contracts::ToolError;
use zm_contracts::validate::{FieldError, validation_error};

use crate::db::DbResult;
use crate::store::Store;

/// The default free-text limit: 64 Ki characters.
pub const DEFAULT_MAX_TEXT_CHARS: usize = 65_536;

/// The operator's limits. The default is the free-text limit of 64 Ki
/// characters and no quota (a single-user install needs none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most characters a free-text field of a write may hold:
    /// `content` and `verbatim` of `remember` and `import_memory`.
    pub max_text_chars: usize,
    /// The most memories one user may store, forgotten ones included
    /// (they stay restorable); `None`: no quota.
    pub quota_memories: Option<u64>,
    /// The most bytes of text one user may store (content and provenance,
    /// which carries `verbatim`, in UTF-8); `None`: no quota.
    pub quota_bytes: Option<u64>,
    /// The text one `export_memories` page carries at most (the
    /// contract's [`EXPORT_PAGE_CHARS`](zm_contracts::EXPORT_PAGE_CHARS);
    /// tests set less).
    pub export_page_chars: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_text_chars: DEFAULT_MAX_TEXT_CHARS,
            quota_memories: None,
            quota_bytes: None,
            export_page_chars: zm_contracts::EXPORT_PAGE_CHARS,
        }
    }
}

impl Limits {
    /// Refuse, as `validation_failed` naming each field and the limit,
    /// every field longer than [`Limits::max_text_chars`] characters (as
    /// sent, untrimmed). Checked before anything else, so a refused input
    /// writes nothing.
    pub(crate) fn check_text<'a>(
        &self,
        fields: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<(), ToolError> {
        let max = self.max_text_chars;
        let too_long: Vec<FieldError> = fields
            .into_iter()
            .filter_map(|(path, text)| {
                let text = text?;
                // A string of at most `max` bytes cannot be longer in
                // characters: skip the count for ordinary inputs.
                (text.len() > max && text.chars().count() > max).then(|| FieldError {
                    path: path.to_string(),
                    reason: format!("must be at most {max} characters"),
                })
            })
            .collect();
        if too_long.is_empty() {
            Ok(())
        } else {
            Err(validation_error(too_long))
        }
    }

    /// Is any quota set?
    pub fn has_quota(&self) -> bool {
        self.quota_memories.is_some() || self.quota_bytes.is_some()
    }

    /// Is `usage` past a quota?
    fn exceeded_by(&self, usage: Usage) -> bool {
        self.quota_memories.is_some_and(|q| usage.memories > q)
            || self.quota_bytes.is_some_and(|q| usage.bytes > q)
    }
}

/// What one user stores (the `storage_usage` row the triggers keep).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub memories: u64,
    pub bytes: u64,
}

/// What the whole installation stores, for `/metrics`: totals only, never
/// a user's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageSummary {
    /// Users storing at least one memory.
    pub users: u64,
    pub memories: u64,
    pub bytes: u64,
    /// Users at or past a quota (0 without quotas).
    pub users_at_quota: u64,
}

impl StorageSummary {
    /// The summary and the configured limits as Prometheus text (gauges).
    pub fn render(&self, limits: &Limits) -> String {
        let gauge = |name: &str, help: &str, v: u64| {
            format!("# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}\n")
        };
        [
            gauge(
                "zm_storage_users",
                "Users storing at least one memory.",
                self.users,
            ),
            gauge(
                "zm_storage_memories",
                "Memories stored, forgotten ones included.",
                self.memories,
            ),
            gauge(
                "zm_storage_bytes",
                "Bytes of text stored (content and provenance, UTF-8).",
                self.bytes,
            ),
            gauge(
                "zm_quota_memories",
                "The per-user memory quota (0: none).",
                limits.quota_memories.unwrap_or(0),
            ),
            gauge(
                "zm_quota_bytes",
                "The per-user byte quota (0: none).",
                limits.quota_bytes.unwrap_or(0),
            ),
            gauge(
                "zm_storage_users_at_quota",
                "Users at or past a quota: their next write is refused.",
                self.users_at_quota,
            ),
        ]
        .concat()
    }
}

/// One user's usage row, through a connection or the pool.
async fn usage_of<'e>(
    db: impl sqlx::Executor<'e, Database = sqlx::Any>,
    user_id: &str,
) -> Result<Option<Usage>, ToolError> {
    let row: Option<(i64, i64)> =
        sqlx::query_as("SELECT memories, bytes FROM storage_usage WHERE user_id = $1")
            .bind(user_id)
            .fetch_optional(db)
            .await
            .db("storage usage")?;
    Ok(row.map(|(m, b)| Usage {
        memories: non_negative(m),
        bytes: non_negative(b),
    }))
}

fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl Store {
    /// The operator's limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The same store (the same pool) under other limits.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Store {
        self.limits = limits;
        self
    }

    /// After a write added memories to `owner`, inside its transaction:
    /// refuse (`forbidden`, rolling the write back) when the owner is now
    /// past a quota. The usage row is updated by the insert's trigger, so
    /// on PostgreSQL concurrent writers of one user queue on that row and
    /// each sees the others' committed memories.
    pub(crate) async fn check_quota(
        &self,
        tx: &mut sqlx::AnyConnection,
        owner: &str,
    ) -> Result<(), ToolError> {
        if !self.limits.has_quota() {
            return Ok(());
        }
        let usage = usage_of(&mut *tx, owner).await?.unwrap_or_default();
        if !self.limits.exceeded_by(usage) {
            return Ok(());
        }
        let quota = |q: Option<u64>, unit: &str| q.map(|q| format!("{q} {unit}"));
        let quotas: Vec<String> = [
            quota(self.limits.quota_memories, "memories"),
            quota(self.limits.quota_bytes, "bytes"),
        ]
        .into_iter()
        .flatten()
        .collect();
        Err(ToolError::forbidden(format!(
            "storage quota reached: this account may store at most {}; it would store {} memories, {} bytes. Forgotten memories still count (they stay restorable). Ask the server's operator to raise the quota.",
            quotas.join(" and "),
            usage.memories,
            usage.bytes
        )))
    }

    /// One user's storage (`None` when they store nothing).
    pub async fn storage_usage(&self, user_id: &str) -> Result<Option<Usage>, ToolError> {
        usage_of(&self.pool, user_id).await
    }

    /// The installation's storage totals (one small aggregate over the
    /// per-user usage rows, not over the memories).
    pub async fn storage_summary(&self) -> Result<StorageSummary, ToolError> {
        // i64::MAX stands for "no quota": nobody reaches it.
        let q = |v: Option<u64>| v.map_or(i64::MAX, |v| i64::try_from(v).unwrap_or(i64::MAX));
        let (users, memories, bytes, at_quota): (i64, Option<i64>, Option<i64>, Option<i64>) =
            sqlx::query_as(
                "SELECT COUNT(*), CAST(SUM(memories) AS BIGINT), CAST(SUM(bytes) AS BIGINT), \
                 CAST(SUM(CASE WHEN memories >= $1 OR bytes >= $2 THEN 1 ELSE 0 END) AS BIGINT) \
                 FROM storage_usage WHERE memories > 0",
            )
            .bind(q(self.limits.quota_memories))
            .bind(q(self.limits.quota_bytes))
            .fetch_one(&self.pool)
            .await
            .db("storage summary")?;
        Ok(StorageSummary {
            users: non_negative(users),
            memories: non_negative(memories.unwrap_or(0)),
            bytes: non_negative(bytes.unwrap_or(0)),
            users_at_quota: non_negative(at_quota.unwrap_or(0)),
        })
    }
}
