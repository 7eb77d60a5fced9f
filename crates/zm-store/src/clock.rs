//! Time, as the store sees it. Tests move it forward instead of sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds in a day.
pub const DAY_MS: i64 = 86_400_000;

/// The store's clock: the system time plus an offset tests can advance.
#[derive(Debug, Default)]
pub struct Clock {
    offset_ms: AtomicI64,
}

impl Clock {
    pub fn now_ms(&self) -> i64 {
        let sys = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        sys + self.offset_ms.load(Ordering::Relaxed)
    }

    /// Move the clock forward (tests: thread expiry, decay, loop TTL).
    pub fn advance_ms(&self, ms: i64) {
        self.offset_ms.fetch_add(ms, Ordering::Relaxed);
    }
}

/// RFC 3339 (UTC, milliseconds) of an epoch-millisecond timestamp.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
