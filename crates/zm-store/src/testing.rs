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

/// The redirect URI test OAuth clients register.
pub(crate) const REDIRECT: &str = "http://127.0.0.1:5000/cb";
/// The PKCE challenge (S256) of RFC 7636's example verifier.
pub(crate) const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

/// A code for `user_id` at `client`, as a sign-in checked against
/// `credential` issues it.
pub(crate) async fn code_for(
    store: &Store,
    client: &str,
    user_id: &str,
    credential: crate::identity::Credential,
) -> String {
    let new = crate::oauth::NewCode {
        client_id: client,
        user_id,
        credential,
        redirect_uri: REDIRECT,
        code_challenge: CHALLENGE,
        resource: None,
        scope: "mcp:read mcp:write",
    };
    store.issue_oauth_code(new, None).await.unwrap()
}

/// `code`, exchanged at `client` with the matching verifier.
pub(crate) async fn exchange_code(
    store: &Store,
    client: &str,
    code: &str,
) -> Result<crate::oauth::IssuedTokens, crate::oauth::OauthError> {
    let ex = crate::oauth::CodeExchange {
        code,
        client_id: client,
        redirect_uri: REDIRECT,
        verifier_challenge: CHALLENGE,
    };
    store.exchange_oauth_code(ex, None, None).await
}
