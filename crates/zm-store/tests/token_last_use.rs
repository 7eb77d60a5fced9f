//! Token last use, on every backend: authentication writes `last_used_at`
//! at most once a minute per token, so a busy client does not turn every
//! request into a write.

mod common;

use common::*;
use zm_store::{SCOPE_READ, Store};

async fn last_used(store: &Store, user_id: &str) -> Option<i64> {
    store.list_tokens(user_id).await.expect("list tokens")[0].last_used_at
}

backend_tests! {
    /// Authentication writes `last_used_at` at most once a minute per token.
    async fn last_use_is_written_at_most_once_a_minute(store: Store, label: &str) {
        let (u, _) = user(&store, "lastuse").await;
        let (_, secret) = store
            .create_token(&u.id, None, &[SCOPE_READ])
            .await
            .expect("create token");
        assert_eq!(last_used(&store, &u.id).await, None, "[{label}] unused");

        // The clock is the system time plus an offset: real time passes too,
        // so the steps below keep a margin of seconds around the minute.
        let before = store.clock().now_ms();
        assert!(store.authenticate(&secret).await.unwrap().is_some(), "[{label}]");
        let first = last_used(&store, &u.id).await.expect("first use recorded");
        assert!(
            first >= before && first <= store.clock().now_ms(),
            "[{label}] first use"
        );

        store.clock().advance_ms(30_000);
        assert!(store.authenticate(&secret).await.unwrap().is_some(), "[{label}]");
        assert_eq!(
            last_used(&store, &u.id).await,
            Some(first),
            "[{label}] 30 s later: unchanged"
        );

        // 50 s, not 59: the store's clock is the wall clock plus what
        // the test added, and a loaded machine may stall for seconds.
        store.clock().advance_ms(20_000);
        assert!(store.authenticate(&secret).await.unwrap().is_some(), "[{label}]");
        assert_eq!(
            last_used(&store, &u.id).await,
            Some(first),
            "[{label}] 50 s later: unchanged"
        );

        store.clock().advance_ms(11_000);
        assert!(store.authenticate(&secret).await.unwrap().is_some(), "[{label}]");
        let moved = last_used(&store, &u.id).await.expect("still recorded");
        assert!(
            moved >= first + 61_000,
            "[{label}] 61 s later: moved ({first} -> {moved})"
        );

        // And again at most once in the next minute.
        store.clock().advance_ms(10_000);
        assert!(store.authenticate(&secret).await.unwrap().is_some(), "[{label}]");
        assert_eq!(
            last_used(&store, &u.id).await,
            Some(moved),
            "[{label}] 10 s after the move: unchanged"
        );
    }
}
