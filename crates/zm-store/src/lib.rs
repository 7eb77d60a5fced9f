//! # zm-store — persistence and the memory operations behind every tool
//!
//! One [`Store`] over SQLite (the embedded default) or PostgreSQL, opened by
//! URL and migrated at open. Every operation takes a [`Caller`] built from
//! authentication, returns zm-contracts outputs, and fails with a
//! [`zm_contracts::ToolError`] whose code is decided here.

pub mod clock;
pub mod db;
pub mod fts;
pub mod guard;
pub mod hint;
pub mod identity;
pub mod memories;
pub mod scopes;
pub mod search;
pub mod similarity;
mod sql;
pub mod store;

pub use db::{Backend, OpenError, OpenOptions, sqlite_url};
pub use identity::{Authenticated, SCOPE_READ, SCOPE_WRITE, TokenInfo, User};
pub use scopes::{ReadSet, Role};
pub use store::{Caller, Store};

/// The tables that hold memory data, with the columns that identify a row's
/// state. Reads must leave them unchanged; the behavioural annotation check
/// compares them. (Session threads, project bindings, scopes and the audit
/// log are operational state, not memory data.)
pub const FINGERPRINT_TABLES: &[(&str, &str)] = &[
    (
        "memories",
        "id, scope, kind, content, visibility, invalidated_at, superseded_by",
    ),
    ("memory_links", "src, dst, type"),
    ("entities", "id, scope, name, type"),
    ("memory_entities", "memory_id, entity_id"),
    ("edges", "src, dst, type"),
    ("conflicts", "id, status, verdict, resolution, winner"),
    ("rules", "id, memory_id, status, pinned, text"),
    ("imports", "owner_id, source_hash, memory_id"),
];
