//! # zm-store — persistence and the memory operations behind every tool
//!
//! One [`Store`] over SQLite (the embedded default) or PostgreSQL, opened by
//! URL and migrated at open. Every operation takes a [`Caller`] built from
//! authentication, returns zm-contracts outputs, and fails with a
//! [`zm_contracts::ToolError`] whose code is decided here.

pub mod audit;
pub(crate) mod background;
pub mod clock;
pub mod conflicts;
pub mod copy;
mod cursor;
pub mod db;
pub mod fingerprint;
pub mod fts;
pub mod graph;
pub mod guard;
pub mod hint;
pub mod identity;
pub mod importer;
pub mod limits;
pub mod memories;
pub mod oauth;
mod rows;
pub mod rules;
pub mod scopes;
pub mod search;
pub mod semantic;
pub mod service;
pub mod shared;
pub mod similarity;
mod sql;
mod statistics;
pub mod store;
pub mod teams;
#[cfg(test)]
mod testing;
pub mod threads;
pub mod transfer;
pub mod usage;
pub mod web;

pub use copy::{CopyError, CopyReport};
pub use db::{Backend, OpenError, OpenOptions, sqlite_path, sqlite_url};
pub use identity::{Authenticated, NewToken, SCOPE_READ, SCOPE_WRITE, TokenInfo, TokenKind, User};
pub use limits::{Limits, StorageSummary, Usage};
pub use scopes::{ReadSet, Role};
pub use service::{Cx, Handler, ToolMetrics, ToolService};
pub use shared::{Admission, NewSession, SessionCaps, SharedSession};
pub use store::{AGENT_NAME_MAX, Caller, Grant, RequestId, Store, Transport, agent_name};

pub use fingerprint::{FINGERPRINT_TABLES, Fingerprint};

/// The variable naming the PostgreSQL database the test suites run
/// against as well as SQLite.
pub const TEST_DATABASE_ENV: &str = "ZM_TEST_DATABASE_URL";

/// Set (CI sets it) to make a test that would skip PostgreSQL fail
/// instead: the PostgreSQL half of the suites must not silently go.
pub const REQUIRE_POSTGRES_ENV: &str = "ZM_REQUIRE_POSTGRES";

/// The test suites' PostgreSQL database ([`TEST_DATABASE_ENV`]), when one
/// is configured; every test that runs on PostgreSQL asks here.
///
/// # Panics
///
/// When [`REQUIRE_POSTGRES_ENV`] is set and no database is: a run that
/// must cover PostgreSQL does not skip it.
pub fn test_database_url() -> Option<String> {
    let url = std::env::var(TEST_DATABASE_ENV)
        .ok()
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty());
    assert!(
        url.is_some() || std::env::var_os(REQUIRE_POSTGRES_ENV).is_none(),
        "{REQUIRE_POSTGRES_ENV} is set but {TEST_DATABASE_ENV} is not: the PostgreSQL half of the tests would be skipped"
    );
    url
}

/// [`test_database_url`] for sessions whose default isolation is
/// REPEATABLE READ (as a server or role may be set up): what the store
/// writes must hold whatever that default is.
pub fn test_database_url_repeatable_read() -> Option<String> {
    test_database_url().map(|url| {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}options=-c%20default_transaction_isolation%3Drepeatable%5C%20read")
    })
}
