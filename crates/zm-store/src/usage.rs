//! How often each user recalled each memory (migrations 0010 and 0024):
//! what the dashboard's Insight page shows a user as their "most
//! recalled" and "never recalled" memories. Counts are per user: a
//! teammate's recalls of a shared memory are their agents' activity, never
//! shown to anyone else.
//!
//! A recall notes its hits in a buffer shared by every clone of the store;
//! the buffer is added to `memory_usage` in one transaction when it is
//! older than [`FLUSH_EVERY`] (on a task the call that finds it due starts,
//! after its own read has answered, one at a time; and by `serve`'s and
//! `stdio`'s own timer, every interval) and at shutdown
//! ([`Store::flush_usage`], which waits for a flush in flight). So a read
//! tool never writes inside its own call, and counting costs one write per
//! interval, not one per recall. Counts of the last interval are lost if
//! the process is killed: they are statistics, not memory data.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use zm_contracts::ToolError;

use crate::db::DbResult;
use crate::rows::col;
use crate::sql::Sql;
use crate::store::{Caller, Store};

/// How long hits wait in memory before they are written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(30);

/// A week in milliseconds: recall activity is counted per week.
pub const WEEK_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// The agents whose recalls the usage figures list one by one, those that
/// recalled most; the others are summed as [`OTHER_AGENTS`].
pub const ACTIVITY_AGENTS: usize = 20;

/// The agent name the recalls of the agents past [`ACTIVITY_AGENTS`] are
/// summed under.
pub const OTHER_AGENTS: &str = "(other agents)";

/// Counts not written yet, and when they were last written.
#[derive(Debug)]
struct Pending {
    /// (user id, memory id) → (recalls, last recalled at).
    hits: HashMap<(String, String), (i64, i64)>,
    /// (user id, agent, week start) → (recalls, memories returned).
    activity: HashMap<(String, String, i64), (i64, i64)>,
    since: Instant,
    /// A flush was started for what is due and has not taken it yet:
    /// recalls meanwhile start no other (while a flush waits on SQLite's
    /// writer, every recall would otherwise queue one more behind it).
    scheduled: bool,
}

/// Taken recall counts: ((user id, memory id), (recalls, last recalled at)).
type HitCounts = Vec<((String, String), (i64, i64))>;
/// Taken activity: ((user id, agent, week start), (recalls, returned)).
type ActivityCounts = Vec<((String, String, i64), (i64, i64))>;

#[derive(Debug)]
pub(crate) struct UsageBuffer {
    inner: Mutex<Pending>,
    /// Held by a flush from its take to its commit: a flush waits for the
    /// one in flight (the shutdown's, the Insight page's "now"), so counts
    /// a recall's background flush took are written, or given back,
    /// before the next flush looks.
    flushing: tokio::sync::Mutex<()>,
}

impl Default for UsageBuffer {
    fn default() -> Self {
        UsageBuffer {
            inner: Mutex::new(Pending {
                hits: HashMap::new(),
                activity: HashMap::new(),
                since: Instant::now(),
                scheduled: false,
            }),
            flushing: tokio::sync::Mutex::new(()),
        }
    }
}

impl UsageBuffer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Note one recall by `agent` of `user` and its hits; true when the
    /// buffer is due to be written.
    pub(crate) fn note<'a>(
        &self,
        user: &str,
        agent: &str,
        ids: impl IntoIterator<Item = &'a str>,
        now: i64,
    ) -> bool {
        let mut g = self.lock();
        let mut returned = 0;
        for id in ids {
            let e = g
                .hits
                .entry((user.to_string(), id.to_string()))
                .or_insert((0, now));
            e.0 += 1;
            e.1 = now;
            returned += 1;
        }
        let week = now.div_euclid(WEEK_MS) * WEEK_MS;
        let e = g
            .activity
            .entry((user.to_string(), agent.to_string(), week))
            .or_insert((0, 0));
        e.0 += 1;
        e.1 += returned;
        let due = !g.scheduled && g.since.elapsed() >= FLUSH_EVERY;
        g.scheduled |= due;
        due
    }

    fn take(&self) -> (HitCounts, ActivityCounts) {
        let mut g = self.lock();
        g.since = Instant::now();
        g.scheduled = false;
        (g.hits.drain().collect(), g.activity.drain().collect())
    }

    /// Put back what [`take`](Self::take) took and could not write (the
    /// transaction failed, so none of it landed): the next flush carries
    /// it, added to what was noted meanwhile.
    fn give_back(&self, hits: HitCounts, activity: ActivityCounts) {
        let mut g = self.lock();
        for (key, (n, at)) in hits {
            let e = g.hits.entry(key).or_insert((0, at));
            e.0 += n;
            e.1 = e.1.max(at);
        }
        for (key, (recalls, returned)) in activity {
            let e = g.activity.entry(key).or_insert((0, 0));
            e.0 += recalls;
            e.1 += returned;
        }
    }
}

/// The Insight page's usage figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// The readable live memories the caller's agents recalled most: (id,
    /// first characters, the caller's recalls).
    pub most: Vec<(String, String, i64)>,
    /// Readable live memories the caller's agents never recalled.
    pub never: i64,
    /// The oldest of them: (id, first characters).
    pub never_oldest: Vec<(String, String)>,
    /// The caller's own recalls per (week start, agent): (recalls,
    /// memories returned), oldest week first; the [`ACTIVITY_AGENTS`] that
    /// recalled most by name, the others summed as [`OTHER_AGENTS`].
    pub activity: Vec<(i64, String, u64, u64)>,
}

impl Store {
    /// Note a recall and its hits; writes the buffer when it is due.
    pub(crate) async fn note_recalled(&self, caller: &Caller, ids: &[&str]) {
        let agent = match caller.agent_name.as_deref().map(str::trim) {
            Some(a) if !a.is_empty() => a.chars().take(100).collect::<String>(),
            _ => caller.transport.as_str().to_string(),
        };
        if self
            .usage
            .note(&caller.user_id, &agent, ids.iter().copied(), self.now())
        {
            // Written on a task of its own: the recall that found the
            // buffer due answers now, and does not wait behind a writer
            // (SQLite's write lock) for counts that are not its own.
            let store = self.clone();
            tokio::spawn(async move {
                if let Err(e) = store.flush_usage().await {
                    tracing::warn!(target: "zm_store", error = %e.message, "writing recall counts failed");
                }
            });
        }
    }

    /// Add the buffered recall counts to `memory_usage` now (at shutdown,
    /// and in tests). Memories erased meanwhile are skipped.
    pub async fn flush_usage(&self) -> Result<(), ToolError> {
        let _turn = self.usage.flushing.lock().await;
        let (entries, activity) = self.usage.take();
        if entries.is_empty() && activity.is_empty() {
            return Ok(());
        }
        let written = self.write_usage(&entries, &activity).await;
        if written.is_err() {
            self.usage.give_back(entries, activity);
        }
        written
    }

    /// Add these counts in one transaction: all of them or none.
    async fn write_usage(
        &self,
        entries: &HitCounts,
        activity: &ActivityCounts,
    ) -> Result<(), ToolError> {
        // Rows in one order on every instance, so two flushes at once
        // queue instead of deadlocking (PostgreSQL).
        let mut activity: Vec<_> = activity.iter().collect();
        activity.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut entries: Vec<_> = entries.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut tx = self.write_tx().await?;
        for ((user, agent, week), (recalls, hits)) in activity {
            sqlx::query(
                "INSERT INTO recall_activity (user_id, agent, week, recalls, hits) \
                 SELECT id, $2, $3, $4, $5 FROM users WHERE id = $1 \
                 ON CONFLICT (user_id, week, agent) DO UPDATE SET recalls = recall_activity.recalls + excluded.recalls, \
                 hits = recall_activity.hits + excluded.hits",
            )
            .bind(user)
            .bind(agent)
            .bind(*week)
            .bind(*recalls)
            .bind(*hits)
            .execute(&mut *tx)
            .await
            .db("recall activity")?;
        }
        for ((user, id), (n, at)) in entries {
            // Skipped when the memory or the user was erased meanwhile.
            sqlx::query(
                "INSERT INTO memory_usage (user_id, memory_id, recalls, last_recalled_at) \
                 SELECT u.id, m.id, $3, $4 FROM users u JOIN memories m ON m.id = $2 WHERE u.id = $1 \
                 ON CONFLICT (user_id, memory_id) DO UPDATE SET recalls = memory_usage.recalls + excluded.recalls, \
                 last_recalled_at = CASE WHEN excluded.last_recalled_at > memory_usage.last_recalled_at \
                   THEN excluded.last_recalled_at ELSE memory_usage.last_recalled_at END",
            )
            .bind(user)
            .bind(id)
            .bind(*n)
            .bind(*at)
            .execute(&mut *tx)
            .await
            .db("recall counts")?;
        }
        tx.commit().await.db("commit recall counts")?;
        Ok(())
    }

    /// Most and never recalled by the caller's agents, among the live
    /// memories the caller reads, and the caller's own recall activity over
    /// the last `weeks` weeks.
    pub async fn usage_figures(&self, caller: &Caller, weeks: i64) -> Result<Usage, ToolError> {
        let visible = self.visible_to(caller).await?;
        let mut most = Sql::new(
            "SELECT m.id AS id, m.content AS content, u.recalls AS recalls FROM memory_usage u JOIN memories m ON m.id = u.memory_id WHERE u.user_id = ",
        );
        most.bind_str(caller.user_id.as_str());
        most.push(" AND ");
        visible.push(&mut most, "m");
        most.push(" AND m.invalidated_at IS NULL ORDER BY u.recalls DESC, u.last_recalled_at DESC, m.seq DESC LIMIT 10");
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
        visible.push(&mut never, "m");
        never
            .push(" AND m.invalidated_at IS NULL AND NOT EXISTS (SELECT 1 FROM memory_usage u WHERE u.memory_id = m.id AND u.user_id = ")
            .bind_str(caller.user_id.as_str())
            .push(")");
        out.never = col(
            &never
                .query()
                .fetch_one(&self.pool)
                .await
                .db("never recalled")?,
            "n",
        )?;
        let mut oldest = Sql::new("SELECT m.id AS id, m.content AS content FROM memories m WHERE ");
        visible.push(&mut oldest, "m");
        oldest
            .push(" AND m.invalidated_at IS NULL AND NOT EXISTS (SELECT 1 FROM memory_usage u WHERE u.memory_id = m.id AND u.user_id = ")
            .bind_str(caller.user_id.as_str())
            .push(") ORDER BY m.seq LIMIT 10");
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
        let from = (self.now().div_euclid(WEEK_MS) - weeks + 1) * WEEK_MS;
        // The agents that recalled most, each on its own; the rest (a
        // client that puts a session or a version in its name makes a new
        // agent per call) summed per week as [`OTHER_AGENTS`].
        let top: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT agent FROM recall_activity WHERE user_id = $1 AND week >= $2 \
             GROUP BY agent ORDER BY SUM(recalls) DESC, {} LIMIT $3",
            self.backend.bytewise("agent")
        )))
        .bind(&caller.user_id)
        .bind(from)
        .bind(i64::try_from(ACTIVITY_AGENTS).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .db("recall activity agents")?;
        if top.is_empty() {
            return Ok(out);
        }
        // One row per week and listed agent, and one per week (agent
        // NULL) summing the rest.
        let mut sql = Sql::new("SELECT week, CASE WHEN agent IN ");
        sql.bind_list(top.iter().cloned());
        sql.push(
            " THEN agent END AS listed, CAST(SUM(recalls) AS BIGINT) AS recalls, \
             CAST(SUM(hits) AS BIGINT) AS hits FROM recall_activity WHERE user_id = ",
        )
        .bind_str(caller.user_id.as_str())
        .push(" AND week >= ")
        .bind_i64(from)
        .push(" GROUP BY week, listed");
        for r in &sql
            .query()
            .fetch_all(&self.pool)
            .await
            .db("recall activity")?
        {
            let listed: Option<String> = col(r, "listed")?;
            out.activity.push((
                col(r, "week")?,
                listed.unwrap_or_else(|| OTHER_AGENTS.to_string()),
                u64::try_from(col::<i64>(r, "recalls")?).unwrap_or(0),
                u64::try_from(col::<i64>(r, "hits")?).unwrap_or(0),
            ));
        }
        out.activity
            .sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts a failed flush took are carried by the next one, added to
    /// what was noted meanwhile, not lost.
    #[test]
    fn counts_given_back_join_the_next_flush() {
        let buffer = UsageBuffer::default();
        buffer.note("usr_a", "cli", ["mem_1", "mem_2"], 1_000);
        let (hits, activity) = buffer.take();
        buffer.note("usr_a", "cli", ["mem_1"], 2_000);
        buffer.give_back(hits, activity);
        let (mut hits, activity) = buffer.take();
        hits.sort();
        let key = |m: &str| ("usr_a".to_string(), m.to_string());
        assert_eq!(
            hits,
            vec![(key("mem_1"), (2, 2_000)), (key("mem_2"), (1, 1_000))]
        );
        assert_eq!(
            activity,
            vec![(("usr_a".to_string(), "cli".to_string(), 0), (2, 3))]
        );
        let (hits, activity) = buffer.take();
        assert!(hits.is_empty() && activity.is_empty(), "taken once");
    }

    /// A buffer due is reported due once until a flush takes it: the
    /// recalls that come while that flush waits (on SQLite's writer)
    /// start no flush of their own.
    #[test]
    fn a_due_buffer_starts_one_flush_until_it_is_taken() {
        let buffer = UsageBuffer::default();
        buffer.lock().since = Instant::now().checked_sub(FLUSH_EVERY).unwrap();
        assert!(buffer.note("usr_a", "cli", ["mem_1"], 1_000), "due");
        for _ in 0..3 {
            assert!(
                !buffer.note("usr_a", "cli", ["mem_1"], 1_000),
                "one already started"
            );
        }
        let (hits, _) = buffer.take();
        assert_eq!(hits.len(), 1);
        buffer.lock().since = Instant::now().checked_sub(FLUSH_EVERY).unwrap();
        assert!(
            buffer.note("usr_a", "cli", ["mem_2"], 2_000),
            "due again once taken"
        );
    }
}
