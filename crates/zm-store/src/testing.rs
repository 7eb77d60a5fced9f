//! Stores for the crate's unit tests that run on every backend.

use crate::Store;

/// A store on a fresh SQLite file (keep the directory alive as long as the
/// store).
pub(crate) async fn sqlite_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = Store::open(&crate::sqlite_url(&dir.path().join("zm.db")))
        .await
        .expect("open the SQLite test store");
    (dir, store)
}

/// A new user (a unique email: the PostgreSQL test database is shared),
/// acting with no session.
pub(crate) async fn test_caller(store: &Store, tag: &str) -> crate::Caller {
    let email = format!(
        "{tag}-{}@example.com",
        crate::identity::random_secret(10).to_lowercase()
    );
    let user = store
        .create_user(&email, "a long test password")
        .await
        .expect("create a test user");
    crate::Caller::new(user.id)
}

/// A fresh SQLite store, and the PostgreSQL database of
/// `ZM_TEST_DATABASE_URL` when it is set (shared: use unique emails).
pub(crate) async fn stores() -> Vec<(&'static str, Option<tempfile::TempDir>, Store)> {
    let (dir, sqlite) = sqlite_store().await;
    let mut out = vec![("sqlite", Some(dir), sqlite)];
    if let Some(url) = crate::test_database_url() {
        let store = Store::open(&url)
            .await
            .expect("open the PostgreSQL test store (ZM_TEST_DATABASE_URL)");
        out.push(("postgres", None, store));
    }
    out
}
