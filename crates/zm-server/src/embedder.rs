//! The background embedder of hybrid recall.
//!
//! Started by `serve` and `stdio` when `--recall-mode hybrid`: it loads the
//! bundled model off the async runtime (recall stays lexical until it is
//! ready), reads the stored vectors into the store's index, then embeds
//! the memories that have no vector of this model yet — newest first, a
//! batch at a time, at most `--embed-per-second` — and keeps the index
//! current: vectors written by other instances every second, owners,
//! scopes and sharing every 30 seconds.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use zm_store::Store;

use crate::config::{Config, RecallMode};

/// Memories embedded per batch (the model's batch size).
const BATCH: usize = 32;
/// How often an idle embedder looks for new work and new vectors.
const IDLE: Duration = Duration::from_secs(1);
/// How often the index re-reads its memories' owners, scopes and sharing.
const META_EVERY: Duration = Duration::from_secs(30);

/// Start the embedder (nothing in lexical mode).
pub fn spawn(
    store: Store,
    cfg: &Config,
    cancel: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    if cfg.recall_mode != RecallMode::Hybrid {
        tracing::debug!("recall is lexical (--recall-mode lexical)");
        return None;
    }
    let per_second = cfg.embed_per_second;
    let dir = cfg.embedding_model.clone();
    Some(tokio::spawn(async move {
        let started = Instant::now();
        // A stop while the model or the vectors load ends the embedder at
        // once: nothing of it is published until both are done, and the
        // runtime's shutdown does not wait long for the blocking load.
        let load = tokio::task::spawn_blocking(move || zm_embed::load(dir.as_deref()));
        let loaded = tokio::select! {
            () = cancel.cancelled() => return,
            loaded = load => loaded,
        };
        let encoder = match loaded {
            Ok(Some(Ok(e))) => e,
            Ok(Some(Err(e))) => {
                // An error, not a warning: a model was configured, and
                // recall runs without it until the next start
                // (`config check` loads it to find this out before).
                tracing::error!(target: crate::commands::OPERATOR, error = %e, "the embedding model did not load: recall stays lexical (`zero-memory config check` loads it and says why)");
                return;
            }
            Ok(None) => {
                tracing::warn!("this build has no embedding model: recall stays lexical");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "loading the embedding model failed: recall stays lexical");
                return;
            }
        };
        tracing::debug!(
            model = encoder.model(),
            ms = started.elapsed().as_millis(),
            "embedding model loaded"
        );
        // The stored vectors first, then the model: recall stays lexical
        // until the index holds them all, rather than fusing with part.
        // A read that fails (the database away) is tried again, with the
        // embedder's back-off, until it works: the model is not used on
        // part of the index, nor given up on.
        let mut loading = Trouble::new("reading the stored vectors");
        loop {
            let read = tokio::select! {
                () = cancel.cancelled() => return,
                read = store.load_encoder(encoder.clone()) => read,
            };
            match read {
                Ok(n) => {
                    loading.worked();
                    tracing::debug!(vectors = n, "hybrid recall is ready");
                    break;
                }
                Err(e) => loading.failed(&e),
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(loading.backoff()) => {}
            }
        }
        run(store, per_second, cancel).await;
    }))
}

/// Failures in a row: the first is a warning, and every
/// [`WARN_EVERY`]th after it (about ten minutes apart once the waits are
/// at their longest), the rest are quiet until one succeeds (a database
/// outage logs a line now and then, not several a second, and one that
/// never ends is not a single line long scrolled away), and the loop
/// waits longer after each (up to [`MAX_BACKOFF`]).
struct Trouble {
    /// The step, as the log names it.
    what: &'static str,
    count: u32,
}

/// The longest wait between attempts while they fail.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A failure in a row of this many is a warning again.
const WARN_EVERY: u32 = 20;

impl Trouble {
    fn new(what: &'static str) -> Self {
        Trouble { what, count: 0 }
    }

    fn failed(&mut self, e: &zm_contracts::ToolError) {
        self.count = self.count.saturating_add(1);
        if self.count == 1 {
            tracing::warn!(error = %e.message, "{} failed; retrying (said again every 20th failure until it works)", self.what);
        } else if self.warns() {
            tracing::warn!(error = %e.message, failures = self.count, "{} still fails; retrying", self.what);
        } else {
            tracing::debug!(error = %e.message, failures = self.count, "{} failed again", self.what);
        }
    }

    /// Is the latest failure one to warn of?
    fn warns(&self) -> bool {
        self.count == 1 || self.count.is_multiple_of(WARN_EVERY)
    }

    fn worked(&mut self) {
        if self.count > 0 {
            tracing::info!(failures = self.count, "{} works again", self.what);
            self.count = 0;
        }
    }

    fn failing(&self) -> bool {
        self.count > 0
    }

    /// The wait after this many failures in a row.
    fn backoff(&self) -> Duration {
        IDLE.saturating_mul(1 << self.count.min(5)).min(MAX_BACKOFF)
    }
}

async fn run(store: Store, per_second: u32, cancel: CancellationToken) {
    let batch = if per_second == 0 {
        BATCH
    } else {
        BATCH.min(per_second as usize).max(1)
    };
    let mut last_meta = Instant::now();
    // One record per step, so one that keeps failing neither hides nor
    // is announced as fixed by another that works.
    let mut embedding = Trouble::new("embedding");
    let mut meta = Trouble::new("refreshing the vector index");
    let mut vectors = Trouble::new("reading new vectors");
    loop {
        if cancel.is_cancelled() {
            return;
        }
        let started = Instant::now();
        let done = match store.embed_pending(batch).await {
            Ok(n) => {
                embedding.worked();
                n
            }
            Err(e) => {
                embedding.failed(&e);
                0
            }
        };
        if last_meta.elapsed() >= META_EVERY {
            last_meta = Instant::now();
            match store.refresh_vector_meta().await {
                Ok(()) => meta.worked(),
                Err(e) => meta.failed(&e),
            }
        }
        let pause = if embedding.failing() {
            embedding.backoff()
        } else if done == 0 {
            match store.refresh_vectors().await {
                Ok(_) => vectors.worked(),
                Err(e) => vectors.failed(&e),
            }
            // A batch whose near-duplicate sweep failed is swept again
            // now, not only once another memory is embedded.
            store.sweep_by_meaning(Vec::new()).await;
            if vectors.failing() {
                vectors.backoff()
            } else {
                IDLE
            }
        } else if per_second > 0 {
            // `done` memories may take `done / per_second` seconds.
            Duration::from_secs_f64(done as f64 / f64::from(per_second))
                .saturating_sub(started.elapsed())
        } else {
            Duration::ZERO
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each failure in a row doubles the wait, up to 30 s; a success
    /// starts again from a second.
    #[test]
    fn failures_back_off_and_a_success_resets() {
        let mut t = Trouble::new("embedding");
        let e = zm_contracts::ToolError::internal();
        let mut waits = Vec::new();
        for _ in 0..7 {
            t.failed(&e);
            waits.push(t.backoff().as_secs());
        }
        assert_eq!(waits, [2, 4, 8, 16, 30, 30, 30]);
        t.worked();
        assert!(!t.failing());
        assert_eq!(t.backoff().as_secs(), 1);
    }

    /// A failure that goes on is warned of again every 20th time (about
    /// ten minutes at the longest wait), not once and then never.
    #[test]
    fn a_failure_that_goes_on_is_warned_of_again() {
        let mut t = Trouble::new("embedding");
        let e = zm_contracts::ToolError::internal();
        let mut warned = Vec::new();
        for n in 1..=45 {
            t.failed(&e);
            if t.warns() {
                warned.push(n);
            }
        }
        assert_eq!(warned, [1, 20, 40]);
        t.worked();
        t.failed(&e);
        assert!(t.warns(), "a new run of failures warns at once");
    }
}
