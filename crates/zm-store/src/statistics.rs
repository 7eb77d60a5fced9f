//! PostgreSQL's planner statistics when nobody else keeps them.
//!
//! The planner picks its plans from `ANALYZE`'s statistics, which
//! autovacuum refreshes on a normally configured server. Where autovacuum
//! is off, a database that was never analysed plans every query blind: the
//! concurrent-writers test took 865 s on a fresh database here (autovacuum
//! off), and 44 s on the same database once analysed. So, on PostgreSQL
//! with autovacuum off, the store analyses the database itself: at open
//! when `memories` has never been analysed, then in the background after
//! as many writes as autovacuum's own analyse threshold would wait for
//! (50 + 10 % of the memories at the last analyse). SQLite needs none of
//! this: its queries pin their join order.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sqlx::AnyPool;

use crate::store::Store;

/// Writes between two analyses, at least (autovacuum's
/// `autovacuum_analyze_threshold`).
const BASE_THRESHOLD: u64 = 50;

#[derive(Debug, Default)]
pub(crate) struct Statistics {
    /// PostgreSQL with autovacuum off: this store keeps the statistics.
    enabled: AtomicBool,
    /// Writes since the last analyse was started.
    writes: AtomicU64,
    /// Writes that start the next analyse.
    threshold: AtomicU64,
    /// An analyse is running.
    running: AtomicBool,
}

impl Statistics {
    /// At open, on PostgreSQL: is autovacuum off? Then analyse now if
    /// `memories` never was, and keep count from here.
    pub(crate) async fn start(&self, pool: &AnyPool) {
        let autovacuum: Option<String> = sqlx::query_scalar("SHOW autovacuum")
            .fetch_optional(pool)
            .await
            .ok()
            .flatten();
        if autovacuum.as_deref() != Some("off") {
            return;
        }
        self.enabled.store(true, Ordering::Relaxed);
        if memories_reltuples(pool).await.is_some_and(|n| n < 0) {
            analyze(pool).await;
        }
        self.threshold
            .store(threshold(pool).await, Ordering::Relaxed);
    }
}

impl Store {
    /// `n` write calls committed: on a store that keeps its own
    /// statistics, start a background analyse once they reach the
    /// threshold (one at a time; the caller never waits on it).
    pub(crate) fn note_writes(&self, n: u64) {
        let s = &self.statistics;
        if !s.enabled.load(Ordering::Relaxed) {
            return;
        }
        let seen = s.writes.fetch_add(n, Ordering::Relaxed) + n;
        if seen < s.threshold.load(Ordering::Relaxed) || s.running.swap(true, Ordering::AcqRel) {
            return;
        }
        s.writes.store(0, Ordering::Relaxed);
        let (stats, pool) = (Arc::clone(s), self.pool.clone());
        tokio::spawn(async move {
            analyze(&pool).await;
            stats
                .threshold
                .store(threshold(&pool).await, Ordering::Relaxed);
            stats.running.store(false, Ordering::Release);
        });
    }
}

/// `ANALYZE` the database; a failure is logged, never a caller's error.
async fn analyze(pool: &AnyPool) {
    if let Err(e) = sqlx::query("ANALYZE").execute(pool).await {
        tracing::warn!(target: "zm_store", error = %e, "ANALYZE failed");
    }
}

/// How many memories the planner counts (`pg_class.reltuples`): -1 when
/// the table was never analysed (PostgreSQL 14 and newer); `None` when it
/// cannot be read.
async fn memories_reltuples(pool: &AnyPool) -> Option<i64> {
    sqlx::query_scalar(
        "SELECT CAST(reltuples AS BIGINT) FROM pg_class WHERE oid = to_regclass('memories')",
    )
    .fetch_optional(pool)
    .await
    .ok()
    .flatten()
}

/// 50 + 10 % of the memories as the planner now counts them.
async fn threshold(pool: &AnyPool) -> u64 {
    let rows = memories_reltuples(pool).await.unwrap_or(0).max(0);
    BASE_THRESHOLD + u64::try_from(rows).unwrap_or(0) / 10
}
