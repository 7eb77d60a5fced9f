//! The migrations against real data and against each other.
//!
//! - **Upgrades.** A database built by the store's own runner at an older
//!   schema (1: the first release; 14: the last before migration 15's
//!   Rust step and the rewrites of 17 to 22), filled with rows of every
//!   kind that schema has, is opened as a server opens it, which migrates
//!   it to the newest schema. Every row keeps every value it had, but
//!   what a migration documents it changes: `session_threads` goes (3),
//!   migration 15 re-keys entities and merges those whose keys now agree
//!   (their mentions and edges move), the ledger gains the versions
//!   applied. PostgreSQL's `memories.fts` (generated, rebuilt by 22 and 27) and
//!   SQLite's full-text tables (rebuilt by 19) are not compared row by
//!   row: full text is asked instead. Opening also writes the server's
//!   two keys into `server_secrets` when none are stored; the fixture
//!   stores them wherever the table exists, so nothing of it changes.
//! - **Parity.** A fresh SQLite file and a fresh PostgreSQL schema,
//!   migrated to the newest version, hold the same tables, columns, keys,
//!   indexes and foreign keys, but a documented allow-list.
//!
//! On PostgreSQL each test works in a schema of its own
//! (`zm_mig_<random>`, through `search_path`), dropped at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use serde_json::json;
use sqlx::Row;
use zm_contracts::{IdKind, ToolName};

use super::*;

/// `INSERT INTO <table> (<col>, …) VALUES ($1, …)` on `$conn` (a
/// transaction), each value bound in order; a column left out keeps its
/// default (NULL for every nullable column here).
macro_rules! insert {
    ($conn:expr, $table:literal, { $($col:literal => $val:expr),+ $(,)? }) => {{
        let columns: &[&str] = &[$($col),+];
        let marks: Vec<String> = (1..=columns.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "INSERT INTO {} ({}) VALUES ({})",
            $table,
            columns.join(", "),
            marks.join(", ")
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            $(.bind($val))+
            .execute(&mut *$conn)
            .await
            .unwrap_or_else(|e| panic!("insert into {}: {e}", $table));
    }};
}

// ------------------------------------------------------------ PostgreSQL

/// A fresh schema of the test PostgreSQL database, as `tests/service.rs`
/// makes them: its connections reach it through `search_path`.
struct PgSchema {
    /// The test database's own URL.
    admin: String,
    name: String,
    /// The URL whose connections work in the schema.
    url: String,
}

impl PgSchema {
    /// `None` (the PostgreSQL half is skipped) without a test database.
    async fn create() -> Option<PgSchema> {
        let admin = crate::test_database_url()?;
        let name = format!(
            "zm_mig_{}",
            crate::identity::random_secret(12).to_lowercase()
        );
        sqlx::any::install_default_drivers();
        let pool = AnyPool::connect(&admin)
            .await
            .expect("connect to the PostgreSQL test database");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
            .execute(&pool)
            .await
            .expect("create a schema");
        pool.close().await;
        let sep = if admin.contains('?') { '&' } else { '?' };
        let url = format!("{admin}{sep}options=-c%20search_path%3D{name}");
        Some(PgSchema { admin, name, url })
    }

    /// Run `test`, then drop the schema with everything in it, whether
    /// or not `test` panicked (its panic is then resumed).
    async fn run<F: Future<Output = ()>>(&self, test: F) {
        let outcome = AssertUnwindSafe(test).catch_unwind().await;
        let pool = AnyPool::connect(&self.admin)
            .await
            .expect("connect to the PostgreSQL test database");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA {} CASCADE",
            self.name
        )))
        .execute(&pool)
        .await
        .expect("drop the test schema");
        pool.close().await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }
}

// ------------------------------------------------------------ catalogue

/// A column as the catalogue describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ColumnInfo {
    name: String,
    /// `int`, `real`, `text`, `bytes`, or `other(<declared type>)`.
    family: String,
    /// Declared NOT NULL; on SQLite a primary-key column counts too
    /// (PostgreSQL makes every primary-key column NOT NULL).
    not_null: bool,
    /// Computed by the database: SQLite's `memories.fts_tenant`,
    /// PostgreSQL's `memories.fts`.
    generated: bool,
}

/// The family of a declared SQLite type or a PostgreSQL `data_type`.
fn family(declared: &str) -> String {
    let d = declared.to_ascii_lowercase();
    let family = if d.contains("int") {
        "int"
    } else if d.contains("real") || d.contains("double") || d.contains("float") {
        "real"
    } else if d.contains("text") || d.contains("char") {
        "text"
    } else if d.contains("blob") || d.contains("bytea") {
        "bytes"
    } else {
        return format!("other({d})");
    };
    family.to_string()
}

/// Every table of the database (on SQLite its own and the full-text
/// index's too), by name.
async fn table_names(pool: &AnyPool, backend: Backend) -> Vec<String> {
    let sql = match backend {
        Backend::Sqlite => "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
        Backend::Postgres => {
            "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name"
        }
    };
    sqlx::query_scalar::<_, String>(sql)
        .fetch_all(pool)
        .await
        .expect("list the tables")
}

/// A table's columns in declaration order.
async fn columns_of(pool: &AnyPool, backend: Backend, table: &str) -> Vec<ColumnInfo> {
    let sql = match backend {
        Backend::Sqlite => {
            "SELECT name AS n, type AS t, CAST(\"notnull\" OR pk > 0 AS INTEGER) AS nn, \
             CAST(hidden IN (2, 3) AS INTEGER) AS g FROM pragma_table_xinfo($1) ORDER BY cid"
        }
        Backend::Postgres => {
            "SELECT CAST(column_name AS TEXT) AS n, CAST(data_type AS TEXT) AS t, \
             CAST(CASE WHEN is_nullable = 'NO' THEN 1 ELSE 0 END AS BIGINT) AS nn, \
             CAST(CASE WHEN is_generated = 'ALWAYS' THEN 1 ELSE 0 END AS BIGINT) AS g \
             FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 \
             ORDER BY ordinal_position"
        }
    };
    let rows = sqlx::query(sql)
        .bind(table)
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("columns of {table}: {e}"));
    rows.iter()
        .map(|r| ColumnInfo {
            name: r.get::<String, _>("n"),
            family: family(&r.get::<String, _>("t")),
            not_null: r.get::<i64, _>("nn") != 0,
            generated: r.get::<i64, _>("g") != 0,
        })
        .collect()
}

// ------------------------------------------------------------ snapshots

/// A table's rows as a snapshot holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Rows {
    /// Every column, generated ones too: what a migration added shows here.
    all_columns: Vec<String>,
    /// The columns read: the stored ones (a generated column is the
    /// database's to recompute), after an upgrade those read before.
    columns: Vec<String>,
    /// Each row's values as text (a byte column in hex), sorted.
    rows: Vec<Vec<Option<String>>>,
}

impl Rows {
    /// The position of a column read.
    fn at(&self, column: &str) -> usize {
        self.columns
            .iter()
            .position(|c| c == column)
            .unwrap_or_else(|| panic!("no column {column} in {:?}", self.columns))
    }
}

/// Table → rows.
type Snapshot = BTreeMap<String, Rows>;

/// A column's value as text, the same way before and after.
fn text_of(backend: Backend, c: &ColumnInfo) -> String {
    let name = &c.name;
    match (backend, c.family.as_str()) {
        (Backend::Sqlite, "bytes") => format!("hex(\"{name}\")"),
        (Backend::Postgres, "bytes") => format!("encode(\"{name}\", 'hex')"),
        _ => format!("CAST(\"{name}\" AS TEXT)"),
    }
}

/// Every row of every table, SQLite's own and the full-text index's
/// tables aside (triggers derive them from `memories`; migration 19
/// rebuilds them). With `like` (the snapshot before an upgrade), a table
/// it holds is read in the columns it read, as far as they still exist.
async fn snapshot(pool: &AnyPool, backend: Backend, like: Option<&Snapshot>) -> Snapshot {
    let mut out = Snapshot::new();
    for table in table_names(pool, backend).await {
        if table.starts_with("sqlite_") || table.starts_with("memories_fts") {
            continue;
        }
        let columns = columns_of(pool, backend, &table).await;
        let stored: Vec<&ColumnInfo> = columns.iter().filter(|c| !c.generated).collect();
        let read: Vec<&ColumnInfo> = match like.and_then(|s| s.get(&table)) {
            Some(earlier) => earlier
                .columns
                .iter()
                .filter_map(|name| stored.iter().copied().find(|c| &c.name == name))
                .collect(),
            None => stored,
        };
        let mut rows: Vec<Vec<Option<String>>> = Vec::new();
        if !read.is_empty() {
            let exprs: Vec<String> = read.iter().map(|c| text_of(backend, c)).collect();
            let sql = format!("SELECT {} FROM \"{table}\"", exprs.join(", "));
            let fetched = sqlx::query(sqlx::AssertSqlSafe(sql))
                .fetch_all(pool)
                .await
                .unwrap_or_else(|e| panic!("read {table}: {e}"));
            for r in &fetched {
                let row: Vec<Option<String>> = (0..read.len())
                    .map(|i| {
                        r.try_get::<Option<String>, _>(i)
                            .unwrap_or_else(|e| panic!("{table}, column {i}: {e}"))
                    })
                    .collect();
                rows.push(row);
            }
            rows.sort();
        }
        out.insert(
            table,
            Rows {
                all_columns: columns.iter().map(|c| c.name.clone()).collect(),
                columns: read.iter().map(|c| c.name.clone()).collect(),
                rows,
            },
        );
    }
    out
}

/// Name every difference between what a table should hold and what it
/// holds.
fn compare_table(problems: &mut Vec<String>, table: &str, want: &Rows, got: Option<&Rows>) {
    let Some(got) = got else {
        problems.push(format!("table {table} is gone"));
        return;
    };
    let gone: Vec<&String> = want
        .columns
        .iter()
        .filter(|c| !got.columns.contains(c))
        .collect();
    if !gone.is_empty() {
        problems.push(format!("{table}: columns gone: {gone:?}"));
        return;
    }
    if want.rows != got.rows {
        let lost: Vec<&Vec<Option<String>>> =
            want.rows.iter().filter(|r| !got.rows.contains(r)).collect();
        let new: Vec<&Vec<Option<String>>> =
            got.rows.iter().filter(|r| !want.rows.contains(r)).collect();
        problems.push(format!(
            "{table} ({}): {} rows before, {} after; lost or changed: {lost:?}; new or changed: {new:?}",
            want.columns.join(", "),
            want.rows.len(),
            got.rows.len()
        ));
    }
}

// ------------------------------------------------------------ the fixture

/// What [`populate`] wrote that the checks look for.
#[derive(Debug, Default)]
struct Fixture {
    alice: String,
    /// A user without a memory: no `storage_usage` row.
    bob: String,
    /// Every memory written: (owner, UTF-8 bytes of content + source).
    memories: Vec<(String, i64)>,
    /// alice's private memory naming `/etc/nginx/nginx.conf`: found by
    /// full text (`nginx conf`) and by recall.
    nginx: String,
    /// alice's shared memory (naming Zola) and its scope.
    shared: String,
    shared_scope: String,
    /// alice's personal access token (the secret).
    pat: String,
    /// bob's revoked personal access token.
    revoked_pat: String,
    /// alice's OAuth access token (schema 2 on).
    oauth_access: Option<String>,
    /// The decomposed "Café" and the composed one it merges into.
    merged: (String, String),
    /// The full-width "ＡＰＩ", re-keyed to `api`.
    rekeyed: String,
    /// Every team event: (team, occurred_at, id) (schema 8 on).
    team_events: Vec<(String, i64, String)>,
}

/// What a memory's row stores for the storage quota: content and source,
/// in UTF-8 bytes.
fn stored_bytes(content: &str, source: Option<&str>) -> i64 {
    i64::try_from(content.len() + source.map_or(0, str::len)).expect("a small memory")
}

/// Fill a database at schema `from` (before 15) with rows of every kind
/// it has, in foreign-key order, as the store of that version wrote
/// them; timestamps around `now`, so that no token has expired.
#[allow(clippy::too_many_lines)]
async fn populate(pool: &AnyPool, from: i64, now: i64) -> Fixture {
    use crate::identity::{hash_secret, random_secret};
    const HOUR: i64 = 3_600_000;
    assert!(
        from < 15,
        "the checks expect migration 15's step still to come"
    );
    let day = crate::clock::DAY_MS;
    let long_ago = now - 30 * day;
    let mut tx = pool.begin().await.expect("begin");
    let mut fx = Fixture::default();

    // Users and tokens.
    let (alice, bob, carol) = (
        IdKind::User.generate(),
        IdKind::User.generate(),
        IdKind::User.generate(),
    );
    let hash = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA";
    for (id, email, owner) in [
        (&alice, "alice@example.com", 1_i64),
        (&bob, "bob@example.com", 0),
        (&carol, "carol@example.com", 0),
    ] {
        insert!(tx, "users", {
            "id" => id, "email" => email, "password_hash" => hash, "is_owner" => owner,
            "created_at" => long_ago,
        });
    }
    let pat = format!("{}{}", crate::identity::PAT_PREFIX, random_secret(40));
    insert!(tx, "access_tokens", {
        "id" => IdKind::AccessToken.generate(), "user_id" => &alice, "kind" => "pat",
        "name" => "laptop", "token_hash" => hash_secret(&pat), "scopes" => "mcp:read mcp:write",
        "created_at" => now - 20 * day, "last_used_at" => now - day,
    });
    let revoked_pat = format!("{}{}", crate::identity::PAT_PREFIX, random_secret(40));
    insert!(tx, "access_tokens", {
        "id" => IdKind::AccessToken.generate(), "user_id" => &bob, "kind" => "pat",
        "token_hash" => hash_secret(&revoked_pat), "scopes" => "mcp:read",
        "created_at" => now - 20 * day, "expires_at" => now + 30 * day, "revoked_at" => now - 2 * day,
    });

    // Scopes.
    let personal = zm_contracts::scope::personal_scope(&alice);
    let project = zm_contracts::scope::project_scope(&alice, "atlas");
    insert!(tx, "scopes", {
        "path" => &project, "kind" => "project", "owner_id" => &alice, "created_at" => long_ago,
    });
    for (user, role) in [(&alice, "admin"), (&bob, "reader")] {
        insert!(tx, "scope_members", {
            "scope" => &project, "user_id" => user, "role" => role, "created_at" => long_ago,
        });
    }
    insert!(tx, "project_bindings", {
        "id" => IdKind::ProjectBinding.generate(), "owner_id" => &alice, "kind" => "remote",
        "key" => "github.com/acme/atlas", "scope" => &project, "created_at" => long_ago,
    });

    // Memories: private with provenance, shared, retired, another owner's.
    let nginx = IdKind::Memory.generate();
    let content = "The proxy reads /etc/nginx/nginx.conf at boot.";
    let source = r#"{"routing":{"via":"default","confidence":1.0},"verbatim":"Zoë: the proxy reads nginx.conf at boot"}"#;
    insert!(tx, "memories", {
        "id" => &nginx, "owner_id" => &alice, "scope" => &personal, "kind" => "fact",
        "content" => content, "content_hash" => crate::memories::content_hash(content),
        "visibility" => "private", "author_kind" => "agent", "agent_name" => "claude-code",
        "source" => source, "translation_status" => "skipped", "created_at" => now - 10 * day,
    });
    fx.memories
        .push((alice.clone(), stored_bytes(content, Some(source))));
    let shared = IdKind::Memory.generate();
    let content = "Café Zola moved the deploys to Fridays — naïve, but agreed.";
    insert!(tx, "memories", {
        "id" => &shared, "owner_id" => &alice, "scope" => &project, "kind" => "decision",
        "content" => content, "content_hash" => crate::memories::content_hash(content),
        "visibility" => "shared", "author_kind" => "human", "translation_status" => "skipped",
        "created_at" => now - 9 * day, "shared_at" => now - 8 * day, "shared_by" => &alice,
    });
    fx.memories
        .push((alice.clone(), stored_bytes(content, None)));
    let retired = IdKind::Memory.generate();
    let content = "The proxy reads /etc/nginx.conf.";
    let source = r#"{"routing":{"via":"hint","confidence":0.5}}"#;
    insert!(tx, "memories", {
        "id" => &retired, "owner_id" => &alice, "scope" => &personal, "kind" => "fact",
        "content" => content, "content_hash" => crate::memories::content_hash(content),
        "visibility" => "private", "author_kind" => "agent", "agent_name" => "claude-code",
        "source" => source, "translation_status" => "skipped", "created_at" => now - 12 * day,
        "invalidated_at" => now - 10 * day, "invalidated_by" => &alice,
        "invalidated_by_agent" => "claude-code", "superseded_by" => &nginx,
    });
    fx.memories
        .push((alice.clone(), stored_bytes(content, Some(source))));
    let content = "Carol prefers tabs 🐙 over spaces.";
    let source = r#"{"verbatim":"tabs 🐙, always"}"#;
    insert!(tx, "memories", {
        "id" => IdKind::Memory.generate(), "owner_id" => &carol,
        "scope" => zm_contracts::scope::personal_scope(&carol), "kind" => "preference",
        "content" => content, "content_hash" => crate::memories::content_hash(content),
        "visibility" => "private", "author_kind" => "agent", "source" => source,
        "translation_status" => "skipped", "created_at" => now - 7 * day,
    });
    fx.memories
        .push((carol.clone(), stored_bytes(content, Some(source))));
    insert!(tx, "memory_links", {
        "src" => &nginx, "dst" => &retired, "type" => "supersedes", "owner_id" => &alice,
        "created_at" => now - 10 * day,
    });

    // Entities under the old key rule (lowercase, nothing normalised): a
    // composed and a decomposed "Café" (one entity once re-keyed), a
    // full-width "ＡＰＩ", and "Zola".
    let [cafe, cafe_decomposed, api, zola] = [
        IdKind::Entity.generate(),
        IdKind::Entity.generate(),
        IdKind::Entity.generate(),
        IdKind::Entity.generate(),
    ];
    for (at, (id, name, key)) in (1_i64..).zip([
        (&cafe, "Caf\u{e9}", "caf\u{e9}"),
        (&cafe_decomposed, "Cafe\u{301}", "cafe\u{301}"),
        (&api, "\u{ff21}\u{ff30}\u{ff29}", "\u{ff41}\u{ff50}\u{ff49}"),
        (&zola, "Zola", "zola"),
    ]) {
        insert!(tx, "entities", {
            "id" => id, "owner_id" => &alice, "scope" => &personal, "name" => name,
            "match_key" => key, "type" => "concept", "created_at" => long_ago + at,
        });
    }
    for (memory, entity) in [
        (&nginx, &cafe),
        (&nginx, &cafe_decomposed),
        (&shared, &cafe_decomposed),
        (&shared, &zola),
    ] {
        insert!(tx, "memory_entities", { "memory_id" => memory, "entity_id" => entity });
    }
    // One edge moves to the composed Café, one would link it to itself
    // (dropped), one points at the decomposed one (moves), one is left.
    insert!(tx, "edges", {
        "id" => IdKind::Edge.generate(), "owner_id" => &alice, "src" => &cafe_decomposed,
        "dst" => &zola, "type" => "relates_to", "weight" => 0.5_f64, "source_memory" => &shared,
        "created_at" => now - 9 * day,
    });
    for (src, dst, ty) in [
        (&cafe, &cafe_decomposed, "relates_to"),
        (&zola, &api, "depends_on"),
        (&zola, &cafe_decomposed, "uses"),
    ] {
        insert!(tx, "edges", {
            "id" => IdKind::Edge.generate(), "owner_id" => &alice, "src" => src, "dst" => dst,
            "type" => ty, "created_at" => now - 9 * day,
        });
    }

    if from < 3 {
        insert!(tx, "session_threads", {
            "id" => format!("sth_{}", random_secret(16)), "owner_id" => &alice,
            "conversation_id" => "conversation-1", "scope" => &personal,
            "created_at" => now - day, "last_seen_at" => now - HOUR, "expires_at" => now + day,
        });
    }
    insert!(tx, "conflicts", {
        "id" => IdKind::MemoryReview.generate(), "owner_id" => &alice, "memory_a" => &nginx,
        "memory_b" => &shared, "verdict" => "contradiction", "confidence" => 0.75_f64,
        "rationale" => "both name the proxy's file", "status" => "pending",
        "created_at" => now - 8 * day,
    });
    insert!(tx, "rules", {
        "id" => IdKind::RuleCandidate.generate(), "owner_id" => &alice, "memory_id" => &shared,
        "text" => "Deploy on Fridays only.", "layer" => "project", "applies_scope" => &project,
        "status" => "promoted", "pinned" => 1_i64, "promoted_at" => now - 7 * day,
        "created_at" => now - 8 * day,
    });
    insert!(tx, "imports", {
        "owner_id" => &alice, "source_hash" => hash_secret("an imported note"),
        "memory_id" => &nginx, "created_at" => now - 10 * day,
    });
    insert!(tx, "imports", {
        "owner_id" => &alice, "source_hash" => hash_secret("a skipped note"),
        "created_at" => now - 10 * day,
    });
    insert!(tx, "audit_log", {
        "id" => IdKind::AuditLog.generate(), "occurred_at" => now - 10 * day,
        "actor_id" => &alice, "author_kind" => "agent", "agent_name" => "claude-code",
        "command" => "remember", "payload" => json!({"memory_id": &nginx}).to_string(),
        "outcome" => "ok", "duration_ms" => 12_i64, "request_id" => IdKind::Request.generate(),
    });

    if from >= 2 {
        let client = IdKind::OauthClient.generate();
        let scope = "mcp:read mcp:write";
        let redirect = "http://127.0.0.1:5000/cb";
        insert!(tx, "oauth_clients", {
            "id" => &client, "client_name" => "Claude Desktop",
            "redirect_uris" => json!([redirect]).to_string(), "owner_id" => &alice,
            "created_at" => now - 5 * day,
        });
        insert!(tx, "oauth_grants", {
            "client_id" => &client, "user_id" => &alice, "scope" => scope,
            "created_at" => now - 5 * day, "last_authorized_at" => now - 5 * day,
            "last_used_at" => now - HOUR,
        });
        let family = format!("fam_{}", random_secret(32));
        insert!(tx, "oauth_families", {
            "id" => &family, "client_id" => &client, "user_id" => &alice, "scope" => scope,
            "resource" => "http://127.0.0.1:8080/mcp", "created_at" => now - 5 * day,
            "last_used_at" => now - HOUR,
        });
        insert!(tx, "oauth_codes", {
            "code_hash" => hash_secret("a spent code"), "client_id" => &client,
            "user_id" => &alice, "redirect_uri" => redirect,
            "code_challenge" => "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM", "scope" => scope,
            "created_at" => now - 5 * day, "expires_at" => now - 5 * day + 300_000,
            "used_at" => now - 5 * day + 1_000, "family_id" => &family,
        });
        let access = format!(
            "{}{}",
            crate::TokenKind::OauthAccess.prefix(),
            random_secret(40)
        );
        insert!(tx, "access_tokens", {
            "id" => IdKind::AccessToken.generate(), "user_id" => &alice, "kind" => "oauth_access",
            "token_hash" => hash_secret(&access), "scopes" => scope, "created_at" => now - 60_000,
            "expires_at" => now + HOUR, "client_id" => &client, "family_id" => &family,
        });
        let refresh = format!(
            "{}{}",
            crate::TokenKind::OauthRefresh.prefix(),
            random_secret(40)
        );
        insert!(tx, "access_tokens", {
            "id" => IdKind::AccessToken.generate(), "user_id" => &alice, "kind" => "oauth_refresh",
            "token_hash" => hash_secret(&refresh), "scopes" => scope, "created_at" => now - 60_000,
            "expires_at" => now + 30 * day, "client_id" => &client, "family_id" => &family,
        });
        fx.oauth_access = Some(access);
    }
    if from >= 3 {
        // The keys an open of this schema stored: the upgrade's open
        // finds them and adds none.
        for name in ["thread_key", "oauth_form_key"] {
            insert!(tx, "server_secrets", {
                "name" => name, "value" => crate::threads::ThreadKey::generate_hex(),
                "created_at" => long_ago,
            });
        }
    }
    if from >= 6 {
        insert!(tx, "rate_windows", {
            "key" => hash_secret("rest 127.0.0.1"), "ends_at" => now + 60_000, "hits" => 3_i64,
        });
        insert!(tx, "login_failures", {
            "account" => hash_secret("bob@example.com"), "failures" => 2_i64,
            "last_at" => now - 60_000, "until_at" => now + 60_000,
        });
        insert!(tx, "mcp_sessions", {
            "id" => IdKind::McpSession.generate(), "user_id" => &alice,
            "conn_id" => IdKind::McpSession.generate(),
            "init_params" => json!({"protocolVersion": "2025-11-25", "clientInfo": {"name": "claude-code"}}).to_string(),
            "attached_project" => &project, "opened_at" => now - HOUR, "seen_at" => now - 60_000,
            "touched" => now - 60_000,
        });
    }
    if from >= 8 {
        // Two teams, each with its steward (a disabled account that holds
        // nothing yet: no storage row either); the second one deleted.
        let (steward, steward_gone) = (IdKind::User.generate(), IdKind::User.generate());
        for (id, email) in [
            (&steward, "steward-crew@zero-memory.invalid"),
            (&steward_gone, "steward-gone@zero-memory.invalid"),
        ] {
            insert!(tx, "users", {
                "id" => id, "email" => email, "password_hash" => "!no-password",
                "is_owner" => 0_i64, "created_at" => now - 6 * day, "disabled_at" => now - 6 * day,
            });
        }
        let (crew, gone) = (IdKind::Team.generate(), IdKind::Team.generate());
        insert!(tx, "teams", {
            "id" => &crew, "slug" => "crew", "name" => "The Crew", "scope" => "team.crew",
            "created_by" => &alice, "created_at" => now - 6 * day, "steward_id" => &steward,
        });
        insert!(tx, "teams", {
            "id" => &gone, "slug" => "gone", "name" => "Gone", "scope" => "team.gone",
            "created_by" => &alice, "created_at" => now - 6 * day, "deleted_at" => now - 2 * day,
            "deleted_by" => &alice, "purge_after" => now + 28 * day, "steward_id" => &steward_gone,
        });
        insert!(tx, "scopes", {
            "path" => "team.crew", "kind" => "team", "owner_id" => &steward,
            "created_at" => now - 6 * day,
        });
        for (user, role) in [(&alice, "admin"), (&bob, "writer")] {
            insert!(tx, "scope_members", {
                "scope" => "team.crew", "user_id" => user, "role" => role,
                "created_at" => now - 6 * day,
            });
        }
        insert!(tx, "team_projects", {
            "team_scope" => "team.crew", "scope" => &project, "owned" => 0_i64,
            "added_by" => &alice, "created_at" => now - 5 * day,
        });
        insert!(tx, "team_invitations", {
            "id" => IdKind::Invitation.generate(), "team_id" => &crew,
            "email" => "carol@example.com", "role" => "reader", "invited_by" => &alice,
            "created_at" => now - day, "expires_at" => now + 6 * day,
        });
        // Events: two of one change share a millisecond, their ids differ
        // in the last character only (the same order bytewise and under
        // any collation); the later one by id is written first.
        let stem = IdKind::TeamEvent.generate();
        let stem = &stem[..stem.len() - 1];
        let tied = now - 4 * day;
        let events = [
            (
                &crew,
                now - 6 * day,
                IdKind::TeamEvent.generate(),
                "team_created",
            ),
            (&crew, tied, format!("{stem}1"), "member_added"),
            (&crew, tied, format!("{stem}0"), "invitation_accepted"),
            (
                &crew,
                now - 3 * day,
                IdKind::TeamEvent.generate(),
                "project_shared",
            ),
            (
                &gone,
                now - 6 * day,
                IdKind::TeamEvent.generate(),
                "team_created",
            ),
            (
                &gone,
                now - 2 * day,
                IdKind::TeamEvent.generate(),
                "team_deleted",
            ),
        ];
        for (team, at, id, action) in events {
            insert!(tx, "team_events", {
                "id" => &id, "team_id" => team, "occurred_at" => at, "actor_id" => &alice,
                "action" => action, "subject_user_id" => &bob, "subject" => "team.crew",
                "role" => "writer", "request_id" => IdKind::Request.generate(),
            });
            fx.team_events.push((team.clone(), at, id));
        }
        insert!(tx, "team_export_grants", { "team_id" => &gone, "user_id" => &alice });
        let content = "The crew's runbook lives in the wiki.";
        insert!(tx, "memories", {
            "id" => IdKind::Memory.generate(), "owner_id" => &alice, "scope" => "team.crew",
            "kind" => "reference", "content" => content,
            "content_hash" => crate::memories::content_hash(content), "visibility" => "shared",
            "author_kind" => "agent", "translation_status" => "skipped",
            "created_at" => now - 3 * day,
        });
        fx.memories
            .push((alice.clone(), stored_bytes(content, None)));
        // An import into the shared project, kept private (migration 26
        // marks it so).
        let content = "The atlas vendor's contract renews in May.";
        insert!(tx, "memories", {
            "id" => IdKind::Memory.generate(), "owner_id" => &alice, "scope" => &project,
            "kind" => "fact", "content" => content,
            "content_hash" => crate::memories::content_hash(content), "visibility" => "private",
            "author_kind" => "agent", "translation_status" => "skipped",
            "created_at" => now - 2 * day,
        });
        fx.memories
            .push((alice.clone(), stored_bytes(content, None)));
    }
    if from >= 9 {
        insert!(tx, "web_sessions", {
            "id" => IdKind::WebSession.generate(), "token_hash" => hash_secret(&random_secret(32)),
            "user_id" => &alice, "created_at" => now - HOUR, "last_seen_at" => now - 60_000,
            "expires_at" => now + day, "user_agent" => "Mozilla/5.0",
        });
    }
    if from >= 10 {
        insert!(tx, "memory_usage", {
            "memory_id" => &nginx, "recalls" => 3_i64, "last_recalled_at" => now - HOUR,
        });
        // A shared memory's count (perhaps a teammate's recalls): not kept
        // by 24.
        insert!(tx, "memory_usage", {
            "memory_id" => &shared, "recalls" => 5_i64, "last_recalled_at" => now - HOUR,
        });
    }
    if from >= 11 {
        let week = 7 * day;
        insert!(tx, "recall_activity", {
            "user_id" => &alice, "agent" => "claude-code", "week" => now / week * week,
            "recalls" => 4_i64, "hits" => 9_i64,
        });
    }
    if from >= 12 {
        insert!(tx, "memory_vectors", {
            "memory_id" => &nginx, "model" => "test-model@1",
            "vec" => vec![0_u8, 0, 128, 63, 1, 255], "embedded_at" => now - HOUR,
        });
        // Refused by the model: no vector.
        insert!(tx, "memory_vectors", {
            "memory_id" => &shared, "model" => "test-model@1", "embedded_at" => now - HOUR,
        });
    }
    tx.commit().await.expect("commit the fixture");

    fx.alice = alice;
    fx.bob = bob;
    fx.nginx = nginx;
    fx.shared = shared;
    fx.shared_scope = project;
    fx.pat = pat;
    fx.revoked_pat = revoked_pat;
    fx.merged = (cafe_decomposed, cafe);
    fx.rekeyed = api;
    fx
}

// ------------------------------------------------------------ upgrades

/// What an old row holds in a column a later migration added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holds {
    /// NULL.
    Null,
    /// A value checked on its own (a backfill, a generated column).
    Checked,
}

/// Every column a migration after the first added to a table that
/// existed before it: (version, only on this backend, table, column,
/// what an old row holds there). PostgreSQL's `memories.fts` is dropped
/// and added again by 22 and 27: there before and after, not new.
const ADDED_COLUMNS: &[(i64, Option<Backend>, &str, &str, Holds)] = &[
    (2, None, "access_tokens", "client_id", Holds::Null),
    (2, None, "access_tokens", "family_id", Holds::Null),
    (2, None, "access_tokens", "used_at", Holds::Null),
    (4, None, "users", "disabled_at", Holds::Null),
    (17, None, "team_events", "seq", Holds::Checked),
    (
        19,
        Some(Backend::Sqlite),
        "memories",
        "fts_tenant",
        Holds::Checked,
    ),
    (24, None, "memory_usage", "user_id", Holds::Checked),
    (26, None, "memories", "kept_private", Holds::Checked),
    (29, None, "oauth_clients", "registered_from", Holds::Null),
];

/// What `before` should read as after the upgrade, the tables checked
/// apart (the ledger, `session_threads`) aside: migration 15's step
/// re-keys every entity by today's rule and merges `fx.merged.0` into
/// `fx.merged.1`, its mentions and edges moving to the survivor (a
/// mention the survivor has and an edge that would link it to itself go
/// with the merged entity).
fn upgraded(before: &Snapshot, fx: &Fixture) -> Snapshot {
    let (gone, into) = (&fx.merged.0, &fx.merged.1);
    let moved = |v: &mut Option<String>| {
        if v.as_deref() == Some(gone.as_str()) {
            *v = Some(into.clone());
        }
    };
    let mut want = before.clone();
    want.remove("zm_schema_migrations");
    want.remove("session_threads");
    // Migration 24 keeps recall counts of private memories only.
    if let Some(t) = want.get_mut("memory_usage") {
        let memory = t.at("memory_id");
        t.rows
            .retain(|r| r[memory].as_deref() != Some(fx.shared.as_str()));
    }
    if let Some(t) = want.get_mut("entities") {
        let (id, name, key) = (t.at("id"), t.at("name"), t.at("match_key"));
        t.rows.retain(|r| r[id].as_deref() != Some(gone.as_str()));
        for r in &mut t.rows {
            let rekeyed = r[name].as_deref().map(crate::memories::match_key);
            r[key] = rekeyed;
        }
        t.rows.sort();
    }
    if let Some(t) = want.get_mut("memory_entities") {
        let entity = t.at("entity_id");
        for r in &mut t.rows {
            moved(&mut r[entity]);
        }
        t.rows.sort();
        t.rows.dedup();
    }
    if let Some(t) = want.get_mut("edges") {
        let (src, dst) = (t.at("src"), t.at("dst"));
        for r in &mut t.rows {
            moved(&mut r[src]);
            moved(&mut r[dst]);
        }
        t.rows.retain(|r| r[src] != r[dst]);
        t.rows.sort();
    }
    want
}

/// A database of schema 1 (the first release), with rows of every kind
/// it has, opened by this build: nothing lost, nothing changed but what
/// the migrations document, and the old data works (full text, an old
/// token, recall). SQLite, and PostgreSQL when a test database is set.
#[tokio::test]
async fn a_populated_schema_one_database_migrates_without_losing_a_row() {
    upgrade_on_every_backend(1).await;
}

/// The same from schema 14, the last before migration 15's entity
/// re-keying and the backfills and rebuilds of 17 to 22: OAuth, teams
/// and their events (two in one millisecond), dashboard sessions, usage
/// and vectors too.
#[tokio::test]
async fn a_populated_schema_fourteen_database_migrates_without_losing_a_row() {
    upgrade_on_every_backend(14).await;
}

async fn upgrade_on_every_backend(from: i64) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = crate::sqlite_url(&dir.path().join("zm.db"));
    upgrade_and_check(&url, from, "sqlite").await;
    if let Some(pg) = PgSchema::create().await {
        pg.run(upgrade_and_check(&pg.url, from, "postgres")).await;
    }
}

/// Build the database at `from` with the runner, fill it, open it as a
/// server does (migrating it), and check what the upgrade kept.
#[allow(clippy::too_many_lines)]
async fn upgrade_and_check(url: &str, from: i64, label: &str) {
    let mut opts = OpenOptions::new(url);
    opts.max_connections = 2;
    let (pool, backend) = connect(&opts).await.expect("connect");
    let clock = Arc::new(Clock::default());
    let at = migrate_to(&pool, backend, &clock, true, from)
        .await
        .expect("migrate to the checkpoint");
    assert_eq!(at, from, "[{label}] the database is at schema {from}");
    let applied: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM zm_schema_migrations ORDER BY version")
            .fetch_all(&pool)
            .await
            .expect("read the ledger");
    assert_eq!(
        applied,
        (1..=from).collect::<Vec<_>>(),
        "[{label}] the runner stopped at {from}"
    );
    let fx = populate(&pool, from, clock.now_ms()).await;
    let before = snapshot(&pool, backend, None).await;
    pool.close().await;

    let store = crate::Store::open_with(opts)
        .await
        .expect("open (and migrate) the old database");
    let pool = &store.pool;
    let after = snapshot(pool, backend, Some(&before)).await;
    let mut problems: Vec<String> = Vec::new();

    // The ledger: every migration, the old entries as they were.
    let ledger: Vec<(i64, String)> =
        sqlx::query("SELECT version, name FROM zm_schema_migrations ORDER BY version")
            .fetch_all(pool)
            .await
            .expect("read the ledger")
            .iter()
            .map(|r| (r.get::<i64, _>("version"), r.get::<String, _>("name")))
            .collect();
    let every: Vec<(i64, String)> = MIGRATIONS
        .iter()
        .map(|m| (m.version, m.name.to_string()))
        .collect();
    if ledger != every {
        problems.push(format!(
            "the ledger lists {ledger:?}, not every migration {every:?}"
        ));
    }
    if let (Some(old), Some(new)) = (
        before.get("zm_schema_migrations"),
        after.get("zm_schema_migrations"),
    ) {
        for row in old.rows.iter().filter(|r| !new.rows.contains(r)) {
            problems.push(format!("ledger entry {row:?} changed or gone"));
        }
    }
    // Dropped by migration 3 (thread tokens are signed since).
    if before.contains_key("session_threads") && after.contains_key("session_threads") {
        problems.push("session_threads was not dropped".into());
    }

    // Every other old row, in its old columns.
    for (table, want) in &upgraded(&before, &fx) {
        compare_table(&mut problems, table, want, after.get(table));
    }

    // The columns added to old tables, and what old rows hold there.
    let mut added: BTreeSet<(String, String)> = BTreeSet::new();
    for (table, old) in &before {
        if let Some(new) = after.get(table) {
            for column in new
                .all_columns
                .iter()
                .filter(|c| !old.all_columns.contains(c))
            {
                added.insert((table.clone(), column.clone()));
            }
        }
    }
    let expected: Vec<&(i64, Option<Backend>, &str, &str, Holds)> = ADDED_COLUMNS
        .iter()
        .filter(|(version, only, table, _, _)| {
            *version > from && only.is_none_or(|b| b == backend) && before.contains_key(*table)
        })
        .collect();
    let expected_set: BTreeSet<(String, String)> = expected
        .iter()
        .map(|(_, _, t, c, _)| ((*t).to_string(), (*c).to_string()))
        .collect();
    for (table, column) in added.difference(&expected_set) {
        problems.push(format!(
            "{table}.{column} is new to an old table but not in ADDED_COLUMNS"
        ));
    }
    for (table, column) in expected_set.difference(&added) {
        problems.push(format!("{table}.{column} was expected to be added"));
    }
    for (_, _, table, column, holds) in &expected {
        if *holds == Holds::Null {
            let sql = format!("SELECT COUNT(*) FROM \"{table}\" WHERE \"{column}\" IS NOT NULL");
            let set: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_one(pool)
                .await
                .expect("count values");
            if set != 0 {
                problems.push(format!(
                    "{table}.{column}: {set} old rows hold a value, not NULL"
                ));
            }
        }
    }

    // Storage totals (backfilled by 5, kept by triggers since): per
    // owner, their memories and bytes; no row for a user without any.
    let mut want_usage: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (owner, bytes) in &fx.memories {
        let entry = want_usage.entry(owner.clone()).or_default();
        entry.0 += 1;
        entry.1 += bytes;
    }
    let usage: BTreeMap<String, (i64, i64)> =
        sqlx::query("SELECT user_id, memories, bytes FROM storage_usage")
            .fetch_all(pool)
            .await
            .expect("read storage_usage")
            .iter()
            .map(|r| {
                (
                    r.get::<String, _>("user_id"),
                    (r.get::<i64, _>("memories"), r.get::<i64, _>("bytes")),
                )
            })
            .collect();
    if usage != want_usage {
        problems.push(format!("storage_usage holds {usage:?}, not {want_usage:?}"));
    }
    if usage.contains_key(&fx.bob) {
        problems.push("a user without memories has a storage_usage row".into());
    }

    // Team events numbered per team by time, then id (backfilled by 17).
    if !fx.team_events.is_empty() {
        let mut events = fx.team_events.clone();
        events.sort();
        let mut want_seq: BTreeMap<String, i64> = BTreeMap::new();
        let mut last_team = String::new();
        let mut n = 0_i64;
        for (team, _, id) in events {
            if team != last_team {
                last_team = team;
                n = 0;
            }
            n += 1;
            want_seq.insert(id, n);
        }
        let seq: BTreeMap<String, i64> = sqlx::query("SELECT id, seq FROM team_events")
            .fetch_all(pool)
            .await
            .expect("read team_events")
            .iter()
            .map(|r| (r.get::<String, _>("id"), r.get::<i64, _>("seq")))
            .collect();
        if seq != want_seq {
            problems.push(format!(
                "team_events.seq is {seq:?}, not {want_seq:?} (per team, by time then id)"
            ));
        }
    }

    // Migration 15: the decomposed Café merged away, the full-width API
    // re-keyed.
    let merged: Option<String> = sqlx::query_scalar("SELECT id FROM entities WHERE id = $1")
        .bind(&fx.merged.0)
        .fetch_optional(pool)
        .await
        .expect("read entities");
    if merged.is_some() {
        problems.push("the decomposed Café was not merged".into());
    }
    let key: Option<String> = sqlx::query_scalar("SELECT match_key FROM entities WHERE id = $1")
        .bind(&fx.rekeyed)
        .fetch_optional(pool)
        .await
        .expect("read entities");
    if key.as_deref() != Some("api") {
        problems.push(format!("the full-width API is keyed {key:?}, not \"api\""));
    }

    // Full text finds the old memories: FTS5 rebuilt by 19 with the
    // owner and scope tokens, the tsvector rebuilt by 22 (and 27) with the words
    // of a path.
    let owner_token = format!("o{}", hex::encode_upper(fx.alice.as_bytes()));
    let scope_token = format!("s{}", hex::encode_upper(fx.shared_scope.as_bytes()));
    let searches: [(&str, &String); 2] = match backend {
        Backend::Sqlite => [
            ("content : (nginx AND conf)", &owner_token),
            ("content : zola", &scope_token),
        ],
        Backend::Postgres => [("nginx & conf", &owner_token), ("zola", &scope_token)],
    };
    for ((query, token), memory) in searches.into_iter().zip([&fx.nginx, &fx.shared]) {
        let found: Vec<String> = match backend {
            Backend::Sqlite => sqlx::query_scalar(
                "SELECT m.id FROM memories_fts JOIN memories m ON m.seq = memories_fts.rowid \
                 WHERE memories_fts MATCH $1",
            )
            .bind(format!("{query} AND fts_tenant : \"{token}\""))
            .fetch_all(pool)
            .await
            .expect("full-text search"),
            Backend::Postgres => {
                sqlx::query_scalar("SELECT id FROM memories WHERE fts @@ to_tsquery('english', $1)")
                    .bind(query)
                    .fetch_all(pool)
                    .await
                    .expect("full-text search")
            }
        };
        if !found.contains(memory) {
            problems.push(format!(
                "full text {query:?} (tenant {token}) finds {found:?}, not {memory}"
            ));
        }
    }
    if backend == Backend::Sqlite {
        for (memory, want) in [
            (&fx.nginx, owner_token.clone()),
            (&fx.shared, format!("{owner_token} {scope_token}")),
        ] {
            let tenant: Option<String> =
                sqlx::query_scalar("SELECT fts_tenant FROM memories WHERE id = $1")
                    .bind(memory)
                    .fetch_one(pool)
                    .await
                    .expect("read fts_tenant");
            if tenant.as_deref() != Some(want.as_str()) {
                problems.push(format!(
                    "memory {memory}: fts_tenant {tenant:?}, not {want:?}"
                ));
            }
        }
    }
    // Migration 24: recall counts of old go to the memory's owner.
    if from >= 10 {
        let counted: Vec<(String, String)> =
            sqlx::query("SELECT user_id, memory_id FROM memory_usage")
                .fetch_all(pool)
                .await
                .expect("read memory_usage")
                .iter()
                .map(|r| {
                    (
                        r.get::<String, _>("user_id"),
                        r.get::<String, _>("memory_id"),
                    )
                })
                .collect();
        if counted != vec![(fx.alice.clone(), fx.nginx.clone())] {
            problems.push(format!(
                "memory_usage holds {counted:?}, not the private memory's old count as its owner's (and none of the shared one's)"
            ));
        }
    }
    // Migration 26: the private memories of a project shared then are
    // kept private; no other.
    let kept: Vec<String> =
        sqlx::query_scalar("SELECT id FROM memories WHERE kept_private = 1 ORDER BY id")
            .fetch_all(pool)
            .await
            .expect("read kept_private");
    let want_kept: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM memories WHERE visibility = 'private' AND scope IN (SELECT scope FROM team_projects) ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .expect("read private memories of shared projects");
    if kept != want_kept || (from >= 6 && kept.len() != 1) {
        problems.push(format!(
            "kept_private marks {kept:?}, not the private memory of the shared project {want_kept:?}"
        ));
    }
    match store.integrity_check().await {
        Ok(true) => {}
        other => problems.push(format!("the integrity check answers {other:?}")),
    }

    assert!(
        problems.is_empty(),
        "[{label}] upgrading from schema {from}:\n{}",
        problems.join("\n")
    );

    // The old credentials and data through the store's API: the old
    // personal token authenticates (the revoked one does not), and
    // recall as its owner finds the old memory.
    let auth = store
        .authenticate(&fx.pat)
        .await
        .expect("authenticate")
        .unwrap_or_else(|| panic!("[{label}] the old personal token no longer authenticates"));
    assert_eq!(auth.user_id, fx.alice, "[{label}]");
    assert_eq!(auth.kind, crate::TokenKind::Pat, "[{label}]");
    assert!(
        store
            .authenticate(&fx.revoked_pat)
            .await
            .expect("authenticate")
            .is_none(),
        "[{label}] a revoked token stays revoked"
    );
    if let Some(access) = &fx.oauth_access {
        let oauth = store
            .authenticate(access)
            .await
            .expect("authenticate")
            .unwrap_or_else(|| {
                panic!("[{label}] the old OAuth access token no longer authenticates")
            });
        assert_eq!(
            (oauth.user_id.as_str(), oauth.kind),
            (fx.alice.as_str(), crate::TokenKind::OauthAccess),
            "[{label}]"
        );
    }
    let service = crate::ToolService::new(store.clone());
    let caller = crate::Caller::authenticated(&auth, crate::Transport::Internal);
    let out = service
        .call(
            &caller,
            ToolName::parse("recall").expect("the recall tool"),
            &json!({"query": "nginx proxy", "scopes": ["*"]}),
        )
        .await
        .expect("recall")
        .to_json();
    let hits: Vec<&str> = out["memories"]
        .as_array()
        .expect("recall's hits")
        .iter()
        .filter_map(|h| h["id"].as_str())
        .collect();
    assert!(
        hits.contains(&fx.nginx.as_str()),
        "[{label}] recall finds {hits:?}, not the old memory {}",
        fx.nginx
    );
    store.close().await;
}

// ------------------------------------------------------------ parity

/// An explicit index.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Index {
    table: String,
    unique: bool,
    /// Its columns in order, comma-separated.
    columns: String,
    /// Has a `WHERE`.
    partial: bool,
}

/// A primary key or a unique constraint (not an explicit unique index).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    table: String,
    /// `primary key` or `unique`.
    kind: &'static str,
    columns: String,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ForeignKey {
    table: String,
    columns: String,
    references: String,
    /// `CASCADE`, `SET NULL`, `NO ACTION`, … (SQLite's spelling).
    on_delete: String,
}

/// A column's shape as compared: its type family and nullability.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    family: String,
    not_null: bool,
}

/// A schema as compared across backends.
#[derive(Debug, Default)]
struct Schema {
    tables: BTreeSet<String>,
    columns: BTreeMap<(String, String), Shape>,
    /// By name.
    indexes: BTreeMap<String, Index>,
    keys: BTreeSet<Key>,
    foreign_keys: BTreeSet<ForeignKey>,
}

/// Tables only SQLite has: the FTS5 index (its shadow tables are
/// `memories_fts_*`), the count of deleted memories (21: SQLite reuses
/// `seq`, a PostgreSQL sequence never does), and SQLite's own counter of
/// `AUTOINCREMENT` keys (`memory_vectors.vseq`).
const SQLITE_ONLY_TABLES: &[&str] = &["memories_fts", "memory_deletions", "sqlite_sequence"];
/// The owner and scope tokens of SQLite's full-text index (19).
const SQLITE_ONLY_COLUMNS: &[(&str, &str)] = &[("memories", "fts_tenant")];
/// PostgreSQL's full-text column (a generated `tsvector`).
const POSTGRES_ONLY_COLUMNS: &[(&str, &str)] = &[("memories", "fts")];
/// SQLite's covering index for full-text ranking (7).
const SQLITE_ONLY_INDEXES: &[&str] = &["memories_rank"];
/// PostgreSQL's GIN index of `memories.fts`.
const POSTGRES_ONLY_INDEXES: &[&str] = &["memories_fts"];

fn sqlite_only_table(table: &str) -> bool {
    SQLITE_ONLY_TABLES.contains(&table) || table.starts_with("memories_fts_")
}

/// Is `(table, column)` one of `only`?
fn allowed_column(only: &[(&str, &str)], (table, column): &(String, String)) -> bool {
    only.iter().any(|(t, c)| t == table && c == column)
}

/// The schema a fresh database reaches through the runner.
async fn migrated_schema(url: &str) -> Schema {
    let mut opts = OpenOptions::new(url);
    opts.max_connections = 2;
    let (pool, backend) = connect(&opts).await.expect("connect");
    migrate(&pool, backend, &Arc::new(Clock::default()), true)
        .await
        .expect("migrate to the newest schema");
    let mut schema = Schema::default();
    for table in table_names(&pool, backend).await {
        for c in columns_of(&pool, backend, &table).await {
            schema.columns.insert(
                (table.clone(), c.name),
                Shape {
                    family: c.family,
                    not_null: c.not_null,
                },
            );
        }
        schema.tables.insert(table);
    }
    match backend {
        Backend::Sqlite => sqlite_constraints(&pool, &mut schema).await,
        Backend::Postgres => postgres_constraints(&pool, &mut schema).await,
    }
    pool.close().await;
    schema
}

/// SQLite's keys, indexes and foreign keys, table by table.
async fn sqlite_constraints(pool: &AnyPool, schema: &mut Schema) {
    let tables: Vec<String> = schema.tables.iter().cloned().collect();
    for table in &tables {
        // The primary key from the columns: an INTEGER PRIMARY KEY (the
        // rowid) has no index of its own.
        let pk: Vec<String> =
            sqlx::query_scalar("SELECT name FROM pragma_table_xinfo($1) WHERE pk > 0 ORDER BY pk")
                .bind(table)
                .fetch_all(pool)
                .await
                .unwrap_or_else(|e| panic!("primary key of {table}: {e}"));
        if !pk.is_empty() {
            schema.keys.insert(Key {
                table: table.clone(),
                kind: "primary key",
                columns: pk.join(","),
            });
        }
        let indexes = sqlx::query(
            "SELECT name, \"unique\" AS uniq, origin, partial FROM pragma_index_list($1)",
        )
        .bind(table)
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("indexes of {table}: {e}"));
        for ix in &indexes {
            let name: String = ix.get("name");
            let origin: String = ix.get("origin");
            let columns: Vec<Option<String>> =
                sqlx::query_scalar("SELECT name FROM pragma_index_info($1) ORDER BY seqno")
                    .bind(&name)
                    .fetch_all(pool)
                    .await
                    .unwrap_or_else(|e| panic!("columns of index {name}: {e}"));
            let columns = columns
                .into_iter()
                .map(|c| c.unwrap_or_else(|| "<expression>".to_string()))
                .collect::<Vec<_>>()
                .join(",");
            match origin.as_str() {
                // CREATE INDEX.
                "c" => {
                    schema.indexes.insert(
                        name,
                        Index {
                            table: table.clone(),
                            unique: ix.get::<i64, _>("uniq") != 0,
                            columns,
                            partial: ix.get::<i64, _>("partial") != 0,
                        },
                    );
                }
                // A UNIQUE constraint.
                "u" => {
                    schema.keys.insert(Key {
                        table: table.clone(),
                        kind: "unique",
                        columns,
                    });
                }
                // The primary key: read from the columns above.
                _ => {}
            }
        }
        let references = sqlx::query(
            "SELECT id, \"table\" AS refers, \"from\" AS col, on_delete \
             FROM pragma_foreign_key_list($1) ORDER BY id, seq",
        )
        .bind(table)
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("foreign keys of {table}: {e}"));
        let mut by_id: BTreeMap<i64, ForeignKey> = BTreeMap::new();
        for r in &references {
            let fk = by_id
                .entry(r.get::<i64, _>("id"))
                .or_insert_with(|| ForeignKey {
                    table: table.clone(),
                    columns: String::new(),
                    references: r.get::<String, _>("refers"),
                    on_delete: r.get::<String, _>("on_delete"),
                });
            if !fk.columns.is_empty() {
                fk.columns.push(',');
            }
            fk.columns.push_str(&r.get::<String, _>("col"));
        }
        schema.foreign_keys.extend(by_id.into_values());
    }
}

/// PostgreSQL's keys, indexes (those no constraint made) and foreign
/// keys, from the catalogue of the current schema.
async fn postgres_constraints(pool: &AnyPool, schema: &mut Schema) {
    // The columns of a constraint (`conkey`), in order.
    const KEY_COLUMNS: &str = "(SELECT string_agg(CAST(a.attname AS TEXT), ',' ORDER BY k.o) \
         FROM unnest(c.conkey) WITH ORDINALITY k(n, o) \
         JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n)";
    let sql = "SELECT CAST(ic.relname AS TEXT) AS idx, CAST(tc.relname AS TEXT) AS tbl, \
         CAST(CASE WHEN ix.indisunique THEN 1 ELSE 0 END AS BIGINT) AS uniq, \
         CAST(CASE WHEN ix.indpred IS NULL THEN 0 ELSE 1 END AS BIGINT) AS part, \
         (SELECT string_agg(CAST(a.attname AS TEXT), ',' ORDER BY k.o) \
          FROM unnest(ix.indkey) WITH ORDINALITY k(n, o) \
          JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = k.n) AS cols \
         FROM pg_index ix JOIN pg_class ic ON ic.oid = ix.indexrelid \
         JOIN pg_class tc ON tc.oid = ix.indrelid JOIN pg_namespace n ON n.oid = tc.relnamespace \
         WHERE n.nspname = current_schema() AND NOT EXISTS \
         (SELECT 1 FROM pg_constraint c WHERE c.conindid = ix.indexrelid AND c.contype IN ('p', 'u'))";
    for r in sqlx::query(sql)
        .fetch_all(pool)
        .await
        .expect("read the indexes")
    {
        schema.indexes.insert(
            r.get::<String, _>("idx"),
            Index {
                table: r.get::<String, _>("tbl"),
                unique: r.get::<i64, _>("uniq") != 0,
                columns: r
                    .get::<Option<String>, _>("cols")
                    .unwrap_or_else(|| "<expression>".to_string()),
                partial: r.get::<i64, _>("part") != 0,
            },
        );
    }
    let sql = format!(
        "SELECT CAST(t.relname AS TEXT) AS tbl, CAST(c.contype AS TEXT) AS kind, {KEY_COLUMNS} AS cols \
         FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid \
         JOIN pg_namespace n ON n.oid = t.relnamespace \
         WHERE n.nspname = current_schema() AND c.contype IN ('p', 'u')"
    );
    for r in sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(pool)
        .await
        .expect("read the keys")
    {
        let kind = if r.get::<String, _>("kind") == "p" {
            "primary key"
        } else {
            "unique"
        };
        schema.keys.insert(Key {
            table: r.get::<String, _>("tbl"),
            kind,
            columns: r.get::<Option<String>, _>("cols").unwrap_or_default(),
        });
    }
    let sql = format!(
        "SELECT CAST(t.relname AS TEXT) AS tbl, {KEY_COLUMNS} AS cols, \
         CAST(r.relname AS TEXT) AS refers, \
         CASE c.confdeltype WHEN 'a' THEN 'NO ACTION' WHEN 'r' THEN 'RESTRICT' WHEN 'c' THEN 'CASCADE' \
         WHEN 'n' THEN 'SET NULL' WHEN 'd' THEN 'SET DEFAULT' ELSE CAST(c.confdeltype AS TEXT) END AS on_delete \
         FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid \
         JOIN pg_class r ON r.oid = c.confrelid JOIN pg_namespace n ON n.oid = t.relnamespace \
         WHERE n.nspname = current_schema() AND c.contype = 'f'"
    );
    for r in sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(pool)
        .await
        .expect("read the foreign keys")
    {
        schema.foreign_keys.insert(ForeignKey {
            table: r.get::<String, _>("tbl"),
            columns: r.get::<Option<String>, _>("cols").unwrap_or_default(),
            references: r.get::<String, _>("refers"),
            on_delete: r.get::<String, _>("on_delete"),
        });
    }
}

/// Name every entry of one side the other lacks or holds differently.
fn diff_maps<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
    what: &str,
    sqlite: &BTreeMap<K, V>,
    postgres: &BTreeMap<K, V>,
    out: &mut Vec<String>,
) {
    for (k, v) in sqlite {
        match postgres.get(k) {
            None => out.push(format!("{what} {k:?} only on SQLite: {v:?}")),
            Some(w) if w != v => out.push(format!("{what} {k:?}: SQLite {v:?}, PostgreSQL {w:?}")),
            Some(_) => {}
        }
    }
    for (k, w) in postgres {
        if !sqlite.contains_key(k) {
            out.push(format!("{what} {k:?} only on PostgreSQL: {w:?}"));
        }
    }
}

fn diff_sets<T: Ord + std::fmt::Debug>(
    what: &str,
    sqlite: &BTreeSet<T>,
    postgres: &BTreeSet<T>,
    out: &mut Vec<String>,
) {
    for x in sqlite.difference(postgres) {
        out.push(format!("{what} only on SQLite: {x:?}"));
    }
    for x in postgres.difference(sqlite) {
        out.push(format!("{what} only on PostgreSQL: {x:?}"));
    }
}

/// What any schema of this build holds, so that two empty readings (a
/// catalogue query that found nothing) do not compare equal.
fn landmarks(label: &str, s: &Schema, out: &mut Vec<String>) {
    if !s
        .columns
        .contains_key(&("users".to_string(), "email".to_string()))
    {
        out.push(format!("{label}: no column users.email read"));
    }
    let key = Key {
        table: "memories".into(),
        kind: "primary key",
        columns: "seq".into(),
    };
    if !s.keys.contains(&key) {
        out.push(format!("{label}: no key {key:?} read"));
    }
    if s.indexes
        .get("memories_live_scope")
        .is_none_or(|i| !i.partial)
    {
        out.push(format!(
            "{label}: no partial index memories_live_scope read"
        ));
    }
    let fk = ForeignKey {
        table: "edges".into(),
        columns: "dst".into(),
        references: "entities".into(),
        on_delete: "CASCADE".into(),
    };
    if !s.foreign_keys.contains(&fk) {
        out.push(format!("{label}: no foreign key {fk:?} read"));
    }
}

/// Every difference between the two schemas but the allow-list, and any
/// entry of the allow-list that is no longer a difference.
fn schema_differences(sqlite: &Schema, postgres: &Schema) -> Vec<String> {
    let mut out = Vec::new();
    landmarks("SQLite", sqlite, &mut out);
    landmarks("PostgreSQL", postgres, &mut out);

    for table in SQLITE_ONLY_TABLES {
        if !sqlite.tables.contains(*table) || postgres.tables.contains(*table) {
            out.push(format!("allow-listed table {table} is not SQLite's only"));
        }
    }
    for (only, mine, other, side) in [
        (SQLITE_ONLY_COLUMNS, sqlite, postgres, "SQLite"),
        (POSTGRES_ONLY_COLUMNS, postgres, sqlite, "PostgreSQL"),
    ] {
        for (table, column) in only {
            let key = ((*table).to_string(), (*column).to_string());
            if !mine.columns.contains_key(&key) || other.columns.contains_key(&key) {
                out.push(format!(
                    "allow-listed column {table}.{column} is not {side}'s only"
                ));
            }
        }
    }
    for (only, mine, other, side) in [
        (SQLITE_ONLY_INDEXES, sqlite, postgres, "SQLite"),
        (POSTGRES_ONLY_INDEXES, postgres, sqlite, "PostgreSQL"),
    ] {
        for index in only {
            if !mine.indexes.contains_key(*index) || other.indexes.contains_key(*index) {
                out.push(format!("allow-listed index {index} is not {side}'s only"));
            }
        }
    }

    let tables: BTreeSet<String> = sqlite
        .tables
        .iter()
        .filter(|t| !sqlite_only_table(t))
        .cloned()
        .collect();
    diff_sets("table", &tables, &postgres.tables, &mut out);

    let sqlite_columns: BTreeMap<(String, String), Shape> = sqlite
        .columns
        .iter()
        .filter(|(k, _)| !sqlite_only_table(&k.0) && !allowed_column(SQLITE_ONLY_COLUMNS, k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let postgres_columns: BTreeMap<(String, String), Shape> = postgres
        .columns
        .iter()
        .filter(|(k, _)| !allowed_column(POSTGRES_ONLY_COLUMNS, k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    diff_maps("column", &sqlite_columns, &postgres_columns, &mut out);

    let sqlite_indexes: BTreeMap<String, Index> = sqlite
        .indexes
        .iter()
        .filter(|(name, ix)| {
            !SQLITE_ONLY_INDEXES.contains(&name.as_str()) && !sqlite_only_table(&ix.table)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let postgres_indexes: BTreeMap<String, Index> = postgres
        .indexes
        .iter()
        .filter(|(name, _)| !POSTGRES_ONLY_INDEXES.contains(&name.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    diff_maps("index", &sqlite_indexes, &postgres_indexes, &mut out);

    let sqlite_keys: BTreeSet<Key> = sqlite
        .keys
        .iter()
        .filter(|k| !sqlite_only_table(&k.table))
        .cloned()
        .collect();
    diff_sets("key", &sqlite_keys, &postgres.keys, &mut out);

    let sqlite_fks: BTreeSet<ForeignKey> = sqlite
        .foreign_keys
        .iter()
        .filter(|f| !sqlite_only_table(&f.table))
        .cloned()
        .collect();
    diff_sets("foreign key", &sqlite_fks, &postgres.foreign_keys, &mut out);
    out
}

/// A fresh SQLite file and a fresh PostgreSQL schema, each migrated to
/// the newest version by the runner, hold the same tables, columns (type
/// family and nullability), explicit indexes (unique, columns, partial),
/// primary and unique keys and foreign keys (with their `ON DELETE`), but
/// the documented allow-list: SQLite's full-text tables, its count of
/// deleted memories and its `sqlite_sequence`, its `memories.fts_tenant`
/// and `memories_rank`; PostgreSQL's `memories.fts` and its GIN index.
/// Only with a PostgreSQL test database.
#[tokio::test]
async fn sqlite_and_postgres_migrate_to_the_same_schema() {
    if crate::test_database_url().is_none() {
        eprintln!("ZM_TEST_DATABASE_URL is not set: skipped the schema comparison");
        return;
    }
    // SQLite first: its schema is read before the PostgreSQL schema is
    // made, so a failure there leaves none behind.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let sqlite = migrated_schema(&crate::sqlite_url(&dir.path().join("zm.db"))).await;
    let Some(pg) = PgSchema::create().await else {
        return;
    };
    pg.run(async {
        let postgres = migrated_schema(&pg.url).await;
        let differences = schema_differences(&sqlite, &postgres);
        assert!(
            differences.is_empty(),
            "the schemas differ:\n{}",
            differences.join("\n")
        );
    })
    .await;
}
