//! The audit log: one append-only row per write command.

use serde_json::{Map, Value, json};
use sqlx::any::AnyRow;
use zm_contracts::{IdKind, ToolError};

use crate::rows::{FromAnyRow, col, json_col};
use crate::store::{Caller, Store};

/// Strings longer than this never reach the audit payload whole.
pub const MAX_AUDIT_STRING: usize = 500;

/// Input fields that carry identifiers and structure, not free text. Every
/// other string is recorded by its length only, so no content, secret or
/// long text lands in the log; so is a structural string the content
/// guard finds a secret in (a refused write is audited with its input),
/// and a `dst` that is not a memory id (`link` names an entity there, free
/// text).
const STRUCTURAL: &[&str] = &[
    "memory_id",
    "memory_ids",
    "dst",
    "type",
    "kind",
    "scope",
    "scopes",
    "target",
    "dispute_id",
    "winner",
    "status",
    "verdict",
    "applies_scope",
    "source_tool",
    "source_hash",
    "thread",
    "keep_both",
    "retire",
    "force",
    "briefing",
    "k",
    "limit",
    "max_tokens",
    "include_graph",
];

fn sanitize(key: Option<&str>, v: &Value, structural: bool) -> Value {
    match v {
        Value::String(s) => {
            let keep = structural
                && key.is_some_and(|k| STRUCTURAL.contains(&k))
                && s.chars().count() <= MAX_AUDIT_STRING
                && (key != Some("dst") || zm_contracts::MemoryId::parse(s).is_ok())
                && crate::guard::scan(s).is_none();
            if keep {
                v.clone()
            } else {
                json!({"chars": s.chars().count()})
            }
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| sanitize(key, x, structural)).collect()),
        Value::Object(o) => {
            let mut out = Map::new();
            for (i, (k, x)) in o.iter().enumerate() {
                out.insert(audit_key(i, k), sanitize(Some(k), x, structural));
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// The longest object key the audit log keeps as it came.
const MAX_AUDIT_KEY: usize = 64;

/// An object key as the log keeps it: a key is a caller's text too (an
/// unknown field, a key of `source`), so a long one, or one the content
/// guard finds a secret in, is kept by its position and length only.
fn audit_key(position: usize, key: &str) -> String {
    let chars = key.chars().count();
    if chars <= MAX_AUDIT_KEY && crate::guard::scan(key).is_none() {
        key.to_string()
    } else {
        format!("<key {position}: {chars} chars>")
    }
}

/// A refusal's message as the log keeps it: withheld when it quotes what
/// the content guard calls a secret (an unknown field's name, say).
fn audit_error(message: &str) -> String {
    if crate::guard::scan(message).is_some() {
        format!(
            "(withheld: the message quotes a secret; {} chars)",
            message.chars().count()
        )
    } else {
        message.chars().take(MAX_AUDIT_STRING).collect()
    }
}

/// The bounded, content-free payload of a command's input.
pub fn audit_payload(input: &Value) -> Value {
    let mut v = sanitize(None, input, true);
    let text = v.to_string();
    if text.len() > 8 * 1024 {
        let keys: Vec<String> = input
            .as_object()
            .map(|o| o.keys().enumerate().map(|(i, k)| audit_key(i, k)).collect())
            .unwrap_or_default();
        v = json!({"truncated": true, "command_keys": keys});
    }
    v
}

/// An audit row as [`Store::audit_rows`] lists it.
struct AuditRow {
    /// When it happened (epoch milliseconds).
    occurred_at: i64,
    command: String,
    payload: Value,
    outcome: String,
    error_code: Option<String>,
    error: Option<String>,
    author_kind: Option<String>,
    agent_name: Option<String>,
    request_id: Option<String>,
    duration_ms: i64,
}

impl FromAnyRow for AuditRow {
    fn from_row(r: &AnyRow) -> Result<AuditRow, ToolError> {
        Ok(AuditRow {
            occurred_at: col(r, "occurred_at")?,
            command: col(r, "command")?,
            payload: json_col(r, "payload")?,
            outcome: col(r, "outcome")?,
            error_code: col(r, "error_code")?,
            error: col(r, "error")?,
            author_kind: col(r, "author_kind")?,
            agent_name: col(r, "agent_name")?,
            request_id: col(r, "request_id")?,
            duration_ms: col(r, "duration_ms")?,
        })
    }
}

/// One audit entry.
pub struct AuditEntry<'a> {
    pub command: &'a str,
    pub payload: &'a Value,
    pub outcome: Result<(), &'a ToolError>,
    pub duration_ms: i64,
}

/// Refused writes' audit rows waiting for SQLite's writer turn at most;
/// past it one is dropped (and said in the log).
pub const AUDITS_WAITING_MAX: usize = 256;

impl Store {
    /// Append an audit row inside the write's own transaction: the write
    /// and its audit row commit together or not at all.
    pub(crate) async fn audit_in(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        entry: &AuditEntry<'_>,
    ) -> Result<(), ToolError> {
        use crate::db::DbResult;
        self.audit_insert(Some(caller), caller.request_id.clone(), entry)
            .execute(conn)
            .await
            .db("audit")?;
        Ok(())
    }

    /// Append the audit row of a refused write (nothing else was written).
    /// A failure is logged and never changes the command's outcome. The
    /// row is written outside any write, as [`Store::audit_outside`] says.
    pub(crate) async fn audit(&self, caller: &Caller, entry: &AuditEntry<'_>) {
        self.audit_outside(
            self.audit_insert(Some(caller), caller.request_id.clone(), entry),
            entry.command,
        )
        .await;
    }

    /// [`Store::audit`] for an event no account is the actor of (an OAuth
    /// registration, a failed sign-in for an email with no account): the
    /// row names no actor and is written the same way, so such a refusal
    /// answers exactly as one for an existing account does (no timing
    /// tells the two apart).
    pub(crate) async fn audit_anonymous(&self, entry: &AuditEntry<'_>, request_id: Option<&str>) {
        self.audit_outside(
            self.audit_insert(None, request_id.map(str::to_string), entry),
            entry.command,
        )
        .await;
    }

    /// Write an audit row outside any write: the one path of every such
    /// row ([`Store::audit`], [`Store::audit_anonymous`]). A failure is
    /// logged. On SQLite the row takes the writer's turn like any write,
    /// so that a refusal behind a long write holds no pooled connection
    /// on the busy timeout (nor dropped when that runs out): while the
    /// turn is held the row is written by a task of its own once it is
    /// free (closing the store waits for those; past
    /// [`AUDITS_WAITING_MAX`] of them the row is dropped, said in the
    /// log), and the refusal is answered at once (the turn's holder may
    /// be this very call's caller).
    async fn audit_outside(
        &self,
        insert: sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments>,
        command: &str,
    ) {
        let command = command.to_string();
        if self.backend == crate::db::Backend::Sqlite {
            if let Ok(turn) = std::sync::Arc::clone(&self.writer_turn).try_acquire_owned() {
                self.write_audit(insert, &command).await;
                drop(turn);
                return;
            }
            // Bounded apart from the writes in flight (never taking a
            // write's place), and waited for when the store closes.
            if self.audits.len() >= AUDITS_WAITING_MAX {
                tracing::warn!(target: "zm_store", command, "an audit row (a refused write, a failed sign-in) was dropped: too many waiting for the writer's turn");
                return;
            }
            let store = self.clone();
            self.audits.spawn(async move {
                let Ok(_turn) = std::sync::Arc::clone(&store.writer_turn)
                    .acquire_owned()
                    .await
                else {
                    return;
                };
                store.write_audit(insert, &command).await;
            });
            return;
        }
        self.write_audit(insert, &command).await;
    }

    async fn write_audit(
        &self,
        insert: sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments>,
        command: &str,
    ) {
        if let Err(e) = insert.execute(&self.pool).await {
            tracing::warn!(target: "zm_store", error = %e, command, "audit write failed");
        }
    }

    /// The insert of one audit row: `actor` is the caller it is written
    /// for, `None` for an anonymous event (no account: the row's actor is
    /// NULL and its author kind `anonymous`).
    fn audit_insert(
        &self,
        actor: Option<&Caller>,
        request_id: Option<String>,
        entry: &AuditEntry<'_>,
    ) -> sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments> {
        let (outcome, code, error) = match entry.outcome {
            Ok(()) => ("ok", None, None),
            Err(e) => (
                "error",
                Some(e.code.as_str().to_string()),
                Some(audit_error(&e.message)),
            ),
        };
        sqlx::query(
            "INSERT INTO audit_log (id, occurred_at, actor_id, author_kind, agent_name, command, payload, outcome, error_code, error, duration_ms, request_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(IdKind::AuditLog.generate())
        .bind(self.now())
        .bind(actor.map(|c| c.user_id.clone()))
        .bind(actor.map_or("anonymous", |c| c.author_kind().as_str()))
        .bind(actor.and_then(|c| c.agent_name.clone()))
        .bind(entry.command.to_string())
        .bind(entry.payload.to_string())
        .bind(outcome)
        .bind(code)
        .bind(error)
        .bind(entry.duration_ms)
        .bind(request_id)
    }

    /// Audit rows of one actor, newest first (operators and tests).
    pub async fn audit_rows(&self, actor_id: &str, limit: i64) -> Result<Vec<Value>, ToolError> {
        use crate::db::DbResult;
        let rows = sqlx::query("SELECT id, occurred_at, command, payload, outcome, error_code, error, author_kind, agent_name, request_id, duration_ms FROM audit_log WHERE actor_id = $1 ORDER BY occurred_at DESC, id DESC LIMIT $2")
            .bind(actor_id)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .db("audit rows")?;
        Ok(AuditRow::from_rows(&rows)?
            .into_iter()
            .map(|r| {
                json!({
                    "occurred_at": crate::clock::rfc3339(r.occurred_at),
                    "command": r.command,
                    "payload": r.payload,
                    "outcome": r.outcome,
                    "error_code": r.error_code,
                    "error": r.error,
                    "author_kind": r.author_kind,
                    "agent_name": r.agent_name,
                    "request_id": r.request_id,
                    "duration_ms": r.duration_ms,
                })
            })
            .collect())
    }
}
