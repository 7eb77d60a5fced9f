//! State that several `serve` instances on one database share (migration
//! 0006): rate-limit windows, the per-account sign-in back-off and
//! MCP-over-HTTP sessions. The HTTP layer decides the policy (limits,
//! back-off steps, caps); this module only keeps the rows, each change one
//! atomic statement or one transaction, and deletes what has expired.
//!
//! Times are epoch milliseconds passed in by the caller (the HTTP layer's
//! clock, which tests advance), except where noted.

use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::Row;
use zm_contracts::ToolError;

use crate::db::{DbResult, InstanceLock};
use crate::identity::hash_secret;
use crate::store::Store;

/// Expired rows are swept on one call in this many (per process), so a hit
/// stays one statement while the tables stay bounded by live windows.
const SWEEP_EVERY: u64 = 64;

static RATE_SWEEP: AtomicU64 = AtomicU64::new(0);
static LOGIN_SWEEP: AtomicU64 = AtomicU64::new(0);

fn sweep_due(tick: &AtomicU64) -> bool {
    tick.fetch_add(1, Ordering::Relaxed)
        .is_multiple_of(SWEEP_EVERY)
}

/// Whole seconds from `now` to `until`, rounded up, at least one.
fn secs_until(now: i64, until: i64) -> u64 {
    let ms = u64::try_from(until.saturating_sub(now)).unwrap_or(0);
    ms.div_ceil(1000).max(1)
}

/// How often a session in steady use is marked seen: its idle expiry is
/// measured from the last mark, so a session may expire up to this much
/// earlier than `idle_ms` after its last request (idle timeouts are minutes).
pub const SESSION_SEEN_EVERY_MS: i64 = 15_000;

/// An MCP session as another request (on any instance) resumes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedSession {
    /// The `Mcp-Session-Id`.
    pub id: String,
    /// The connection's transport session (`ses_…`): provenance and thread
    /// conversations use it, so it must not change between instances.
    pub conn_id: String,
    pub attached_project: Option<String>,
    pub thread: Option<String>,
}

/// A session to record after its `initialize` succeeded.
#[derive(Debug, Clone)]
pub struct NewSession<'a> {
    pub id: &'a str,
    pub user_id: &'a str,
    pub conn_id: &'a str,
    /// The client's `initialize` parameters (JSON), replayed by an instance
    /// that restores the session; `None`: the session cannot move.
    pub init_params: Option<&'a str>,
}

/// The caps a new session is admitted under.
#[derive(Debug, Clone, Copy)]
pub struct SessionCaps {
    /// Sessions one user keeps; more ends that user's least recently used.
    pub per_user: usize,
    /// Sessions overall; beyond it the new one is refused.
    pub total: usize,
    /// Sessions not seen for this long are gone.
    pub idle_ms: i64,
}

/// The outcome of admitting a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// Whether the new session was recorded (`false`: the server is full).
    pub admitted: bool,
    /// The user's sessions ended to stay within the per-user cap.
    pub evicted: Vec<String>,
}

impl Store {
    /// Count one request for `key` in a fixed window of `window_ms`
    /// anchored at its first request: `Err(seconds)` (the honest
    /// `Retry-After`) when `max` requests were already counted. A refused
    /// request does not count. One atomic upsert: concurrent instances on
    /// one database share the count.
    pub async fn rate_hit(
        &self,
        key: &str,
        max: u32,
        window_ms: i64,
        now: i64,
    ) -> Result<Result<(), u64>, ToolError> {
        if sweep_due(&RATE_SWEEP) {
            sqlx::query("DELETE FROM rate_windows WHERE ends_at <= $1")
                .bind(now)
                .execute(&self.pool)
                .await
                .db("sweep rate windows")?;
        }
        // `hits` stops at max + 1: a refused request leaves the count alone.
        let row = sqlx::query(
            "INSERT INTO rate_windows (key, ends_at, hits) VALUES ($1, $2, 1) \
             ON CONFLICT (key) DO UPDATE SET \
               ends_at = CASE WHEN rate_windows.ends_at <= $3 THEN EXCLUDED.ends_at ELSE rate_windows.ends_at END, \
               hits = CASE WHEN rate_windows.ends_at <= $3 THEN 1 \
                           WHEN rate_windows.hits <= $4 THEN rate_windows.hits + 1 \
                           ELSE rate_windows.hits END \
             RETURNING ends_at, hits",
        )
        .bind(hash_secret(key))
        .bind(now.saturating_add(window_ms))
        .bind(now)
        .bind(i64::from(max))
        .fetch_one(&self.pool)
        .await
        .db("count a rate-limited request")?;
        let ends: i64 = row.try_get("ends_at").db("rate window end")?;
        let hits: i64 = row.try_get("hits").db("rate window hits")?;
        Ok(if hits <= i64::from(max) {
            Ok(())
        } else {
            Err(secs_until(now, ends))
        })
    }

    /// Take a place for a sign-in attempt of `account`, before its
    /// password is checked: `Err(seconds)` (the honest `Retry-After`)
    /// while the account backs off, counting nothing; otherwise the
    /// attempt counts now, as a failure (a count older than `forget_ms`
    /// starts over) until [`login_succeeded`](Self::login_succeeded)
    /// clears the account, and the back-off `backoff_ms` gives for the new
    /// count starts (0: none). Returns the new count.
    ///
    /// One transaction: the upsert holds the account's row until the
    /// commit, so attempts at once — on any instance — take their places
    /// one after another, and each sees the back-off the ones before it
    /// started. Checking first and counting after the password check let
    /// every attempt in flight through.
    pub async fn login_attempt(
        &self,
        account: &str,
        now: i64,
        forget_ms: i64,
        backoff_ms: impl FnOnce(u32) -> i64,
    ) -> Result<Result<u32, u64>, ToolError> {
        let key = hash_secret(account);
        if sweep_due(&LOGIN_SWEEP) {
            sqlx::query("DELETE FROM login_failures WHERE last_at <= $1 AND until_at <= $2")
                .bind(now.saturating_sub(forget_ms))
                .bind(now)
                .execute(&self.pool)
                .await
                .db("sweep sign-in failures")?;
        }
        // An account backing off is refused by a read: a flood of attempts
        // on it writes nothing and queues on no lock. The upsert below
        // decides whatever this read misses (a back-off that began since).
        let until: Option<i64> =
            sqlx::query_scalar("SELECT until_at FROM login_failures WHERE account = $1")
                .bind(&key)
                .fetch_optional(&self.pool)
                .await
                .db("read a sign-in back-off")?;
        if let Some(until) = until.filter(|u| *u > now) {
            return Ok(Err(secs_until(now, until)));
        }
        let mut tx = self.write_tx().await?;
        // While the account backs off the row stays as it is (and
        // `until_at` in the future says so); otherwise the attempt counts.
        let row = sqlx::query(
            "INSERT INTO login_failures (account, failures, last_at, until_at) VALUES ($1, 1, $2, 0) \
             ON CONFLICT (account) DO UPDATE SET \
               failures = CASE WHEN login_failures.until_at > $2 THEN login_failures.failures \
                               WHEN login_failures.last_at <= $3 THEN 1 \
                               ELSE login_failures.failures + 1 END, \
               last_at = CASE WHEN login_failures.until_at > $2 THEN login_failures.last_at ELSE $2 END \
             RETURNING failures, until_at",
        )
        .bind(&key)
        .bind(now)
        .bind(now.saturating_sub(forget_ms))
        .fetch_one(&mut *tx)
        .await
        .db("count a sign-in attempt")?;
        let count: i64 = row.try_get("failures").db("sign-in failures")?;
        let until: i64 = row.try_get("until_at").db("sign-in back-off end")?;
        if until > now {
            tx.rollback().await.db("end a refused sign-in attempt")?;
            return Ok(Err(secs_until(now, until)));
        }
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        let wait = backoff_ms(count);
        if wait > 0 {
            sqlx::query(
                "UPDATE login_failures SET until_at = CASE WHEN until_at < $2 THEN $2 ELSE until_at END WHERE account = $1",
            )
            .bind(&key)
            .bind(now.saturating_add(wait))
            .execute(&mut *tx)
            .await
            .db("start a sign-in back-off")?;
        }
        tx.commit().await.db("commit a sign-in attempt")?;
        Ok(Ok(count))
    }

    /// A successful sign-in clears the account's failures.
    pub async fn login_succeeded(&self, account: &str) -> Result<(), ToolError> {
        sqlx::query("DELETE FROM login_failures WHERE account = $1")
            .bind(hash_secret(account))
            .execute(&self.pool)
            .await
            .db("clear sign-in failures")?;
        Ok(())
    }

    /// Record a session that just completed `initialize`, in one
    /// transaction (serialised across instances): delete sessions idle for
    /// `caps.idle_ms`, end the user's least recently used sessions beyond
    /// `caps.per_user`, then refuse the new one if `caps.total` sessions
    /// remain — never ending another user's.
    pub async fn mcp_session_admit(
        &self,
        new: NewSession<'_>,
        caps: SessionCaps,
    ) -> Result<Admission, ToolError> {
        crate::service::rerun_on_contention("admit an MCP session", || {
            self.mcp_session_admit_once(new.clone(), caps)
        })
        .await
    }

    /// One attempt at [`Store::mcp_session_admit`].
    async fn mcp_session_admit_once(
        &self,
        new: NewSession<'_>,
        caps: SessionCaps,
    ) -> Result<Admission, ToolError> {
        let now = self.now();
        let mut tx = self.write_tx().await?;
        // One admission at a time across instances: the counts below
        // must not race.
        crate::db::lock_across_instances(&mut tx, self.backend, InstanceLock::SessionAdmission)
            .await
            .db("lock session admission")?;
        sqlx::query("DELETE FROM mcp_sessions WHERE seen_at <= $1")
            .bind(now.saturating_sub(caps.idle_ms))
            .execute(&mut *tx)
            .await
            .db("expire idle sessions")?;
        let mine: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM mcp_sessions WHERE user_id = $1 ORDER BY touched, opened_at, id",
        )
        .bind(new.user_id)
        .fetch_all(&mut *tx)
        .await
        .db("list a user's sessions")?;
        let over = (mine.len() + 1).saturating_sub(caps.per_user.max(1));
        let evicted: Vec<String> = mine.into_iter().take(over).collect();
        for id in &evicted {
            sqlx::query("DELETE FROM mcp_sessions WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await
                .db("end a session")?;
        }
        let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM mcp_sessions")
            .fetch_one(&mut *tx)
            .await
            .db("count sessions")?;
        let admitted = usize::try_from(total).unwrap_or(usize::MAX) < caps.total.max(1);
        if admitted {
            sqlx::query(
                "INSERT INTO mcp_sessions (id, user_id, conn_id, init_params, attached_project, thread, opened_at, seen_at, touched) \
                 VALUES ($1, $2, $3, $4, NULL, NULL, $5, $5, (SELECT COALESCE(MAX(touched), 0) + 1 FROM mcp_sessions))",
            )
            .bind(new.id)
            .bind(new.user_id)
            .bind(new.conn_id)
            .bind(new.init_params)
            .bind(now)
            .execute(&mut *tx)
            .await
            .db("record a session")?;
        }
        tx.commit().await.db("commit session admission")?;
        Ok(Admission { admitted, evicted })
    }

    /// Resume session `id` for `user_id`: `None` unless it is that user's
    /// and was seen within `idle_ms` (a foreign, ended or expired id reads
    /// the same). Marks it used — a write only when it changes something:
    /// the session is not already its user's most recently used, or was
    /// last marked [`SESSION_SEEN_EVERY_MS`] ago or more. A client calling
    /// through one session costs a read per request, not a write (on
    /// SQLite a write takes the database's one write lock and a disk sync).
    pub async fn mcp_session_touch(
        &self,
        id: &str,
        user_id: &str,
        idle_ms: i64,
    ) -> Result<Option<SharedSession>, ToolError> {
        let now = self.now();
        let fresh = sqlx::query(
            "SELECT conn_id, attached_project, thread FROM mcp_sessions \
             WHERE id = $1 AND user_id = $2 AND seen_at > $3 \
             AND touched = (SELECT MAX(touched) FROM mcp_sessions WHERE user_id = $2)",
        )
        .bind(id)
        .bind(user_id)
        .bind(now.saturating_sub(SESSION_SEEN_EVERY_MS.min(idle_ms)))
        .fetch_optional(&self.pool)
        .await
        .db("read a session")?;
        if let Some(r) = fresh {
            return Ok(Some(SharedSession {
                id: id.to_string(),
                conn_id: r.try_get("conn_id").db("session conn_id")?,
                attached_project: r.try_get("attached_project").db("session project")?,
                thread: r.try_get("thread").db("session thread")?,
            }));
        }
        let row = sqlx::query(
            "UPDATE mcp_sessions SET seen_at = $3, touched = (SELECT COALESCE(MAX(touched), 0) + 1 FROM mcp_sessions) \
             WHERE id = $1 AND user_id = $2 AND seen_at > $4 \
             RETURNING conn_id, attached_project, thread",
        )
        .bind(id)
        .bind(user_id)
        .bind(now)
        .bind(now.saturating_sub(idle_ms))
        .fetch_optional(&self.pool)
        .await
        .db("resume a session")?;
        row.map(|r| -> Result<SharedSession, ToolError> {
            Ok(SharedSession {
                id: id.to_string(),
                conn_id: r.try_get("conn_id").db("session conn_id")?,
                attached_project: r.try_get("attached_project").db("session project")?,
                thread: r.try_get("thread").db("session thread")?,
            })
        })
        .transpose()
    }

    /// The `initialize` parameters of a live session (another instance
    /// replays the handshake from them).
    pub async fn mcp_session_init_params(
        &self,
        id: &str,
        idle_ms: i64,
    ) -> Result<Option<String>, ToolError> {
        let params: Option<Option<String>> = sqlx::query_scalar(
            "SELECT init_params FROM mcp_sessions WHERE id = $1 AND seen_at > $2",
        )
        .bind(id)
        .bind(self.now().saturating_sub(idle_ms))
        .fetch_optional(&self.pool)
        .await
        .db("read a session's initialize")?;
        Ok(params.flatten())
    }

    /// Keep what a tool call reported for the session: the attachment it
    /// decided, and an issued thread. `attach` is `(held, reported)`: the
    /// attachment the session held when the call began and the one the
    /// call reported. It is stored only over `held` (a compare-and-set):
    /// first attach wins for an unattached session (of two calls that
    /// attached it at once, the second keeps the first's), and a held
    /// project the caller no longer reaches (the only reason a read reports
    /// another) is replaced, or cleared, once. Answers the attachment the
    /// session keeps (`None` when `attach` is). `thread` is an issued
    /// thread and the project its briefing was pinned to: it is kept only
    /// while the session is attached to no project or to that one, judged
    /// by the row as it is then (a parallel call may have attached the
    /// session elsewhere, and a thread pinned to another project would
    /// route its scope-less writes there).
    pub async fn mcp_session_carry(
        &self,
        id: &str,
        attach: Option<(Option<&str>, Option<&str>)>,
        thread: Option<(&str, Option<&str>)>,
    ) -> Result<Option<String>, ToolError> {
        let mut kept = None;
        if let Some((held, reported)) = attach {
            sqlx::query(
                "UPDATE mcp_sessions SET attached_project = $2 WHERE id = $1 \
                 AND (attached_project = $3 OR (attached_project IS NULL AND $4 = 1))",
            )
            .bind(id)
            .bind(reported)
            .bind(held.unwrap_or(""))
            .bind(i64::from(held.is_none()))
            .execute(&self.pool)
            .await
            .db("carry a session's project")?;
            kept = sqlx::query_scalar("SELECT attached_project FROM mcp_sessions WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .db("read a session's project")?
                .flatten();
        }
        if let Some((thread, pin)) = thread {
            // A project id is never empty: with no pin, only an unattached
            // session keeps the thread.
            sqlx::query(
                "UPDATE mcp_sessions SET thread = $2 WHERE id = $1 \
                 AND (attached_project IS NULL OR attached_project = $3)",
            )
            .bind(id)
            .bind(thread)
            .bind(pin.unwrap_or(""))
            .execute(&self.pool)
            .await
            .db("carry a session's thread")?;
        }
        Ok(kept)
    }

    /// End a session (the client's `DELETE`).
    pub async fn mcp_session_close(&self, id: &str) -> Result<(), ToolError> {
        sqlx::query("DELETE FROM mcp_sessions WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await
            .db("end a session")?;
        Ok(())
    }

    /// Which of `ids` are sessions recorded now (expired ones not yet
    /// swept included): an instance ends the workers of the others,
    /// whose rows an end on the dashboard, an eviction or an erasure
    /// removed elsewhere.
    pub async fn mcp_sessions_recorded(
        &self,
        ids: &[&str],
    ) -> Result<std::collections::HashSet<String>, ToolError> {
        let mut recorded = std::collections::HashSet::new();
        for chunk in ids.chunks(100) {
            let mut sql = crate::sql::Sql::new("SELECT id FROM mcp_sessions WHERE id IN (");
            for (i, id) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                sql.bind_str(*id);
            }
            sql.push(")");
            for row in sql
                .query()
                .fetch_all(&self.pool)
                .await
                .db("recorded sessions")?
            {
                recorded.insert(crate::rows::col::<String>(&row, "id")?);
            }
        }
        Ok(recorded)
    }

    /// Sessions recorded now, expired ones not yet swept included (tests:
    /// nothing leaks).
    pub async fn mcp_session_count(&self) -> Result<usize, ToolError> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM mcp_sessions")
            .fetch_one(&self.pool)
            .await
            .db("count sessions")?;
        Ok(usize::try_from(n).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::stores;

    #[tokio::test]
    async fn rate_windows_count_refuse_and_restart() {
        for (name, _dir, store) in stores().await {
            let key = format!("test:{}", zm_contracts::IdKind::Request.generate());
            let now = store.now();
            assert_eq!(store.rate_hit(&key, 2, 60_000, now).await.unwrap(), Ok(()));
            assert_eq!(
                store.rate_hit(&key, 2, 60_000, now + 1).await.unwrap(),
                Ok(())
            );
            // Refused, with the honest wait, however often it is tried.
            for _ in 0..3 {
                let secs = store.rate_hit(&key, 2, 60_000, now + 500).await.unwrap();
                assert_eq!(secs, Err(60), "{name}");
            }
            assert_eq!(
                store.rate_hit(&key, 2, 60_000, now + 59_001).await.unwrap(),
                Err(1),
                "{name}"
            );
            // Another key is independent; the window ends and starts over.
            assert_eq!(
                store
                    .rate_hit(&format!("{key}x"), 2, 60_000, now)
                    .await
                    .unwrap(),
                Ok(())
            );
            assert_eq!(
                store.rate_hit(&key, 2, 60_000, now + 60_000).await.unwrap(),
                Ok(()),
                "{name}"
            );
            assert_eq!(
                store.rate_hit(&key, 2, 60_000, now + 60_001).await.unwrap(),
                Ok(())
            );
            assert!(
                store
                    .rate_hit(&key, 2, 60_000, now + 60_002)
                    .await
                    .unwrap()
                    .is_err()
            );
            // Ended windows are swept: none is left after a later sweep.
            for _ in 0..SWEEP_EVERY {
                let _ = store
                    .rate_hit("sweeper", 1_000_000, 1, now + 10_000_000)
                    .await
                    .unwrap();
            }
            let left: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM rate_windows WHERE ends_at <= $1")
                    .bind(now + 9_000_000)
                    .fetch_one(&store.pool)
                    .await
                    .unwrap();
            assert_eq!(left, 0, "{name}: ended windows swept");
            let stored: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM rate_windows WHERE key = $1")
                    .bind(&key)
                    .fetch_one(&store.pool)
                    .await
                    .unwrap();
            assert_eq!(stored, 0, "{name}: keys are stored hashed only");
        }
    }

    #[tokio::test]
    async fn login_attempts_count_back_off_and_clear() {
        for (name, _dir, store) in stores().await {
            let account = format!("{}@example.com", zm_contracts::IdKind::Request.generate());
            let now = store.now();
            let policy = |n: u32| if n >= 3 { 30_000 } else { 0 };
            let attempt = |at: i64| store.login_attempt(&account, at, 3_600_000, policy);
            for i in 1..=3u32 {
                assert_eq!(attempt(now).await.unwrap(), Ok(i), "{name}");
            }
            // The third started the back-off: refused, counting nothing.
            for _ in 0..3 {
                assert_eq!(attempt(now + 1).await.unwrap(), Err(30), "{name}");
            }
            assert_eq!(attempt(now + 30_000).await.unwrap(), Ok(4), "{name}");
            assert!(attempt(now + 30_001).await.unwrap().is_err());
            // A count older than the forget time starts over.
            let later = now + 3_600_001 + 30_000;
            assert_eq!(attempt(later).await.unwrap(), Ok(1), "{name}");
            attempt(later).await.unwrap().unwrap();
            attempt(later).await.unwrap().unwrap();
            assert!(attempt(later).await.unwrap().is_err());
            store.login_succeeded(&account).await.unwrap();
            assert_eq!(attempt(later).await.unwrap(), Ok(1), "{name}: cleared");
            let stored: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM login_failures WHERE account = $1")
                    .bind(&account)
                    .fetch_one(&store.pool)
                    .await
                    .unwrap();
            assert_eq!(stored, 0, "{name}: emails are stored hashed only");
        }
    }

    #[tokio::test]
    async fn sessions_are_owned_capped_and_expire() {
        for (name, _dir, store) in stores().await {
            let a = store
                .create_user(
                    &format!("{}@example.com", zm_contracts::IdKind::Request.generate()),
                    "password-a-123",
                )
                .await
                .unwrap();
            let b = store
                .create_user(
                    &format!("{}@example.com", zm_contracts::IdKind::Request.generate()),
                    "password-b-123",
                )
                .await
                .unwrap();
            let caps = SessionCaps {
                per_user: 2,
                total: 1_000_000,
                idle_ms: 60_000,
            };
            let sid = |i: usize| format!("{name}-{}-{i}", a.id);
            let open = |id: String, user: String| {
                let store = store.clone();
                async move {
                    store
                        .mcp_session_admit(
                            NewSession {
                                id: &id,
                                user_id: &user,
                                conn_id: "ses_x",
                                init_params: Some("{}"),
                            },
                            caps,
                        )
                        .await
                        .unwrap()
                }
            };
            assert!(open(sid(1), a.id.clone()).await.admitted);
            assert!(open(sid(2), a.id.clone()).await.admitted);
            // Using 1 makes 2 the least recently used.
            assert!(
                store
                    .mcp_session_touch(&sid(1), &a.id, 60_000)
                    .await
                    .unwrap()
                    .is_some()
            );
            let third = open(sid(3), a.id.clone()).await;
            assert_eq!(
                third,
                Admission {
                    admitted: true,
                    evicted: vec![sid(2)]
                },
                "{name}"
            );
            assert!(
                store
                    .mcp_session_touch(&sid(2), &a.id, 60_000)
                    .await
                    .unwrap()
                    .is_none()
            );
            // Steady use of the most recent session writes nothing until
            // SESSION_SEEN_EVERY_MS has passed.
            let seen = |id: String| {
                let store = store.clone();
                async move {
                    sqlx::query_scalar::<_, i64>("SELECT seen_at FROM mcp_sessions WHERE id = $1")
                        .bind(id)
                        .fetch_one(&store.pool)
                        .await
                        .unwrap()
                }
            };
            let before = seen(sid(3)).await;
            store.clock().advance_ms(1_000);
            assert!(
                store
                    .mcp_session_touch(&sid(3), &a.id, 60_000)
                    .await
                    .unwrap()
                    .is_some()
            );
            assert_eq!(seen(sid(3)).await, before, "{name}: no write");
            store.clock().advance_ms(SESSION_SEEN_EVERY_MS);
            assert!(
                store
                    .mcp_session_touch(&sid(3), &a.id, 60_000)
                    .await
                    .unwrap()
                    .is_some()
            );
            assert!(seen(sid(3)).await > before, "{name}: marked again");
            // Another user's id reads as missing.
            assert!(
                store
                    .mcp_session_touch(&sid(1), &b.id, 60_000)
                    .await
                    .unwrap()
                    .is_none()
            );
            let kept = store
                .mcp_session_carry(
                    &sid(1),
                    Some((None, Some("proj"))),
                    Some(("thr", Some("proj"))),
                )
                .await
                .unwrap();
            assert_eq!(kept.as_deref(), Some("proj"), "{name}: attached");
            // A second attachment (a parallel call's) keeps the first.
            let kept = store
                .mcp_session_carry(&sid(1), Some((None, Some("other"))), None)
                .await
                .unwrap();
            assert_eq!(
                kept.as_deref(),
                Some("proj"),
                "{name}: the first attach wins"
            );
            // That parallel call's thread, pinned to the project it lost,
            // is not kept: it would route writes away from `proj`.
            store
                .mcp_session_carry(
                    &sid(1),
                    Some((None, Some("other"))),
                    Some(("thr-other", Some("other"))),
                )
                .await
                .unwrap();
            let s = store
                .mcp_session_touch(&sid(1), &a.id, 60_000)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                (
                    s.attached_project.as_deref(),
                    s.thread.as_deref(),
                    s.conn_id.as_str()
                ),
                (Some("proj"), Some("thr"), "ses_x")
            );
            assert_eq!(
                store
                    .mcp_session_init_params(&sid(1), 60_000)
                    .await
                    .unwrap()
                    .as_deref(),
                Some("{}")
            );
            // A held project the caller left is replaced over itself only:
            // once, and not by a call that began before the replacement.
            let carry = |held: Option<&'static str>, to: Option<&'static str>| {
                let (store, id) = (store.clone(), sid(1));
                async move {
                    store
                        .mcp_session_carry(&id, Some((held, to)), None)
                        .await
                        .unwrap()
                }
            };
            assert_eq!(
                carry(Some("proj"), Some("next")).await.as_deref(),
                Some("next"),
                "{name}"
            );
            assert_eq!(
                carry(Some("proj"), Some("stale")).await.as_deref(),
                Some("next"),
                "{name}"
            );
            assert_eq!(carry(Some("next"), None).await, None, "{name}: cleared");
            assert_eq!(
                carry(None, Some("proj")).await.as_deref(),
                Some("proj"),
                "{name}"
            );
            // The Access page lists the open ones ...
            let listed = store.mcp_sessions_of(&a.id, 60_000).await.unwrap();
            assert_eq!(listed.len(), 2, "{name}: sessions 1 and 3 are open");
            // Idle past the limit: gone, listed or not swept yet.
            store.clock().advance_ms(60_001);
            assert!(
                store
                    .mcp_sessions_of(&a.id, 60_000)
                    .await
                    .unwrap()
                    .is_empty(),
                "{name}: an idle session is not listed as open"
            );
            assert!(
                store
                    .mcp_session_touch(&sid(3), &a.id, 60_000)
                    .await
                    .unwrap()
                    .is_none()
            );
            assert!(
                store
                    .mcp_session_init_params(&sid(3), 60_000)
                    .await
                    .unwrap()
                    .is_none()
            );
            store.mcp_session_close(&sid(1)).await.unwrap();
            assert!(
                store
                    .mcp_session_init_params(&sid(1), 1_000_000)
                    .await
                    .unwrap()
                    .is_none()
            );
        }
    }
}
