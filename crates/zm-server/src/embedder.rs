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
        let loaded = tokio::task::spawn_blocking(move || zm_embed::load(dir.as_deref())).await;
        let encoder = match loaded {
            Ok(Some(Ok(e))) => e,
            Ok(Some(Err(e))) => {
                tracing::warn!(error = %e, "the embedding model did not load: recall stays lexical");
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
        match store.load_encoder(encoder).await {
            Ok(n) => tracing::debug!(vectors = n, "hybrid recall is ready"),
            Err(e) => tracing::warn!(error = %e.message, "reading the stored vectors failed"),
        }
        run(store, per_second, cancel).await;
    }))
}

async fn run(store: Store, per_second: u32, cancel: CancellationToken) {
    let batch = if per_second == 0 {
        BATCH
    } else {
        BATCH.min(per_second as usize).max(1)
    };
    let mut last_meta = Instant::now();
    loop {
        if cancel.is_cancelled() {
            return;
        }
        let started = Instant::now();
        let done = match store.embed_pending(batch).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e.message, "embedding failed; retrying");
                0
            }
        };
        if last_meta.elapsed() >= META_EVERY {
            last_meta = Instant::now();
            if let Err(e) = store.refresh_vector_meta().await {
                tracing::warn!(error = %e.message, "refreshing the vector index failed");
            }
        }
        let pause = if done == 0 {
            if let Err(e) = store.refresh_vectors().await {
                tracing::warn!(error = %e.message, "reading new vectors failed");
            }
            IDLE
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
