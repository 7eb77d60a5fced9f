//! How often each memory was recalled (migration 0010): what the
//! dashboard's Insight page shows as "most recalled" and "never recalled".
//!
//! A recall notes its hits in a buffer shared by every clone of the store;
//! the buffer is added to `memory_usage` in one transaction when it is
//! older than [`FLUSH_EVERY`] (by the call that finds it due, after its own
//! read has answered) and at shutdown ([`Store::flush_usage`]). So a read
//! tool never writes inside its own call, and counting costs one write per
//! interval, not one per recall. Counts of the last interval are lost if
//! the process is killed: they are statistics, not memory data.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use zm_contracts::ToolError;

use crate::db::DbResult;
use crate::rows::col;
use crate::scopes::push_visible;
use crate::sql::Sql;
use crate::store::{Caller, Store};

/// How long hits wait in memory before they are written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(30);

/// Hits not written yet: memory id → (recalls, last recalled at), and
/// when they were last written.
type Pending = (HashMap<String, (i64, i64)>, Instant);

#[derive(Debug)]
pub(crate) struct UsageBuffer {
    inner: Mutex<Pending>,
}

impl Default for UsageBuffer {
    fn default() -> Self {
        UsageBuffer {
            inner: Mutex::new((HashMap::new(), Instant::now())),
        }
    }
}

impl UsageBuffer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Note one recall's hits; true when the buffer is due to be written.
    pub(crate) fn note<'a>(&self, ids: impl IntoIterator<Item = &'a str>, now: i64) -> bool {
        let mut g = self.lock();
        for id in ids {
            let e = g.0.entry(id.to_string()).or_insert((0, now));
            e.0 += 1;
            e.1 = now;
        }
        g.1.elapsed() >= FLUSH_EVERY && !g.0.is_empty()
    }

    fn take(&self) -> Vec<(String, i64, i64)> {
        let mut g = self.lock();
        g.1 = Instant::now();
        g.0.drain().map(|(id, (n, t))| (id, n, t)).collect()
    }
}

/// The Insight page's usage figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// The most recalled readable live memories: (id, first characters,
    /// recalls).
    pub most: Vec<(String, String, i64)>,
    /// Readable live memories never recalled.
    pub never: i64,
    /// The oldest of them: (id, first characters).
    pub never_oldest: Vec<(String, String)>,
}

impl Store {
    /// Note a recall's hits; writes the buffer when it is due.
    pub(crate) async fn note_recalled(&self, ids: &[&str]) {
        if self.usage.note(ids.iter().copied(), self.now())
            && let Err(e) = self.flush_usage().await
        {
            tracing::warn!(target: "zm_store", error = %e.message, "writing recall counts failed");
        }
    }

    /// Add the buffered recall counts to `memory_usage` now (at shutdown,
    /// and in tests). Memories erased meanwhile are skipped.
    pub async fn flush_usage(&self) -> Result<(), ToolError> {
        let entries = self.usage.take();
        if entries.is_empty() {
            return Ok(());
        }
        let mut tx = self.write_tx().await?;
        for (id, n, at) in entries {
            sqlx::query(
                "INSERT INTO memory_usage (memory_id, recalls, last_recalled_at) \
                 SELECT id, $2, $3 FROM memories WHERE id = $1 \
                 ON CONFLICT (memory_id) DO UPDATE SET recalls = memory_usage.recalls + excluded.recalls, \
                 last_recalled_at = excluded.last_recalled_at",
            )
            .bind(&id)
            .bind(n)
            .bind(at)
            .execute(&mut *tx)
            .await
            .db("recall counts")?;
        }
        tx.commit().await.db("commit recall counts")?;
        Ok(())
    }

    /// Most and never recalled, among the live memories the caller reads.
    pub async fn usage_figures(&self, caller: &Caller) -> Result<Usage, ToolError> {
        let mut most = Sql::new(
            "SELECT m.id AS id, m.content AS content, u.recalls AS recalls FROM memory_usage u JOIN memories m ON m.id = u.memory_id WHERE ",
        );
        push_visible(&mut most, "m", &caller.user_id);
        most.push(" AND m.invalidated_at IS NULL ORDER BY u.recalls DESC, u.last_recalled_at DESC LIMIT 10");
        let mut out = Usage::default();
        for r in &most
            .query()
            .fetch_all(&self.pool)
            .await
            .db("most recalled")?
        {
            let content: String = col(r, "content")?;
            out.most.push((
                col(r, "id")?,
                content.chars().take(120).collect(),
                col(r, "recalls")?,
            ));
        }
        let mut never = Sql::new("SELECT COUNT(*) AS n FROM memories m WHERE ");
        push_visible(&mut never, "m", &caller.user_id);
        never.push(" AND m.invalidated_at IS NULL AND NOT EXISTS (SELECT 1 FROM memory_usage u WHERE u.memory_id = m.id)");
        out.never = col(
            &never
                .query()
                .fetch_one(&self.pool)
                .await
                .db("never recalled")?,
            "n",
        )?;
        let mut oldest = Sql::new("SELECT m.id AS id, m.content AS content FROM memories m WHERE ");
        push_visible(&mut oldest, "m", &caller.user_id);
        oldest.push(" AND m.invalidated_at IS NULL AND NOT EXISTS (SELECT 1 FROM memory_usage u WHERE u.memory_id = m.id) ORDER BY m.seq LIMIT 10");
        for r in &oldest
            .query()
            .fetch_all(&self.pool)
            .await
            .db("never recalled, oldest")?
        {
            let content: String = col(r, "content")?;
            out.never_oldest
                .push((col(r, "id")?, content.chars().take(120).collect()));
        }
        Ok(out)
    }
}
