//! What the crate's unit tests share.

use serde_json::json;

/// A store on a fresh SQLite file (keep the directory alive as long as
/// the store).
pub(crate) async fn sqlite_store() -> (tempfile::TempDir, zm_store::Store) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = zm_store::Store::open(&zm_store::sqlite_url(&dir.path().join("zm.db")))
        .await
        .expect("open the SQLite test store");
    (dir, store)
}

/// `n` memories of `caller` in `scope`, each `"{what} {i}."`, through
/// the tool service.
pub(crate) async fn remember_n(
    store: &zm_store::Store,
    caller: &zm_store::Caller,
    scope: &str,
    what: &str,
    n: u32,
) {
    let tools = zm_store::ToolService::new(store.clone());
    for i in 0..n {
        tools
            .call(
                caller,
                zm_contracts::ToolName::Remember,
                &json!({"content": format!("{what} {i}."), "kind": "fact", "scope": scope}),
            )
            .await
            .expect("remember");
    }
}
