//! The tool service: the one pipeline every tool call goes through, from
//! every transport (MCP over stdio and HTTP, REST, the CLI's import).
//!
//! ```text
//!  transport ── Caller + tool + raw JSON ──▶ ToolService::call
//!     1. authorise   the caller's grant against the tool's declared Access
//!     2. validate    zm_contracts::parse_input → the tool's typed input
//!     3. handle      the tool's typed handler (generated dispatch)
//!                    · read tools get no write transaction
//!                    · write tools share one, opened on first use
//!     4. audit       write tools: the audit row joins the write's
//!                    transaction, then it commits (a failure rolls back
//!                    and is audited on its own; a PostgreSQL deadlock
//!                    victim or serialization failure re-runs the call
//!                    from scratch, up to 4 attempts, then `conflict`)
//!     5. measure     calls, errors by code, latency — per tool and transport
//!  transport ◀── ToolOutput (typed: session, ranked/linked ids, footer facts)
//! ```
//!
//! Transports only encode the typed [`ToolOutput`]; they never read tool
//! output by key and hold no copy of these policies.

mod handlers;
mod metrics;

use std::time::Instant;

use serde_json::Value;
use sqlx::AnyConnection;
use zm_contracts::catalogue::tool;
use zm_contracts::{Access, MemoryId, ToolContract, ToolError, ToolName, ToolOutput, parse_input};

use crate::audit::{AuditEntry, audit_payload};
use crate::store::{Caller, Store};

pub use metrics::ToolMetrics;

/// A tool's typed handler: `Input → Result<Output, ToolError>` over a
/// call context. Implemented once per tool (in `handlers.rs`); the
/// dispatch over [`ToolName`] is generated from the catalogue. The input
/// is `Clone` so that a write that lost to concurrent writes can be run
/// again from the same input (see [`ToolService::run`]).
pub trait Handler: ToolContract<Input: Clone> {
    fn handle(
        store: &Store,
        cx: &mut Cx<'_>,
        input: Self::Input,
    ) -> impl Future<Output = Result<Self::Output, ToolError>> + Send;
}

/// The context of one call: the caller, and — for write tools only — the
/// one transaction the handler and its audit row share, begun when the
/// handler first needs it (so pure work before that holds no lock).
pub struct Cx<'a> {
    pub caller: &'a Caller,
    store: &'a Store,
    access: Access,
    tx: TxSlot<'a>,
    /// Memories whose owner, scope, sharing or liveness this call changed:
    /// the vector index re-reads them once the call has committed.
    placed: Vec<MemoryId>,
    /// An edit's promise (see [`ToolService::edit`]): the `remember` of
    /// this call retires this memory in its own transaction, or the whole
    /// call fails with `conflict` and nothing is written.
    replaces: Option<&'a MemoryId>,
}

/// The write transaction of a call: not begun yet, the call's own, or a
/// batch's (the call runs inside a savepoint of it).
enum TxSlot<'a> {
    Unopened,
    Own(crate::store::WriteTx),
    Batch(&'a mut AnyConnection),
}

impl<'a> Cx<'a> {
    pub(crate) fn new(store: &'a Store, caller: &'a Caller, access: Access) -> Self {
        Cx {
            caller,
            store,
            access,
            tx: TxSlot::Unopened,
            placed: Vec::new(),
            replaces: None,
        }
    }

    /// A call inside a batch's transaction.
    fn in_batch(
        store: &'a Store,
        caller: &'a Caller,
        access: Access,
        conn: &'a mut AnyConnection,
    ) -> Self {
        Cx {
            caller,
            store,
            access,
            tx: TxSlot::Batch(conn),
            placed: Vec::new(),
            replaces: None,
        }
    }

    /// The call's write transaction. A read tool has none: asking for it
    /// is a bug, answered with `internal` (and logged), never a write.
    pub(crate) async fn tx(&mut self) -> Result<&mut AnyConnection, ToolError> {
        if self.access == Access::Read {
            tracing::error!(target: "zm_store", "a read tool asked for a write transaction");
            return Err(ToolError::internal());
        }
        if matches!(self.tx, TxSlot::Unopened) {
            self.tx = TxSlot::Own(
                self.store
                    .write_tx_of(Some(self.caller.user_id.as_str()))
                    .await?,
            );
        }
        match &mut self.tx {
            TxSlot::Own(tx) => Ok(&mut **tx),
            TxSlot::Batch(conn) => Ok(&mut **conn),
            TxSlot::Unopened => Err(ToolError::internal()),
        }
    }

    /// The memory this call must retire, when it is an edit.
    pub(crate) fn replaces(&self) -> Option<&MemoryId> {
        self.replaces
    }

    /// Note that this call changed memory `id`'s owner, scope, sharing or
    /// liveness (what the vector index pre-filters by).
    pub(crate) fn placement_changed(&mut self, id: &str) {
        self.placed.push(MemoryId::from_trusted(id));
    }

    /// Commit the call's own transaction (a batch commits its own); the
    /// memories whose placement it changed.
    async fn commit(self) -> Result<Vec<MemoryId>, ToolError> {
        use crate::db::DbResult;
        match self.tx {
            TxSlot::Own(tx) => tx.commit().await.db("commit")?,
            TxSlot::Unopened | TxSlot::Batch(_) => {}
        }
        Ok(self.placed)
    }
}

/// How many times a write call (or a batch's item) runs at most when it
/// keeps losing to concurrent writes (a PostgreSQL deadlock victim, a
/// serialization failure).
const WRITE_ATTEMPTS: u32 = 4;

/// The wait before re-running a write that lost after `attempt` attempts:
/// 5–10 ms after the first, then twice as long each time (at most 40 ms
/// before the fourth), jittered so that the writes that collided do not
/// meet again in step.
async fn back_off(attempt: u32) {
    let base = 5_u64 << attempt.saturating_sub(1).min(3);
    let wait = rand::random_range(base..=2 * base);
    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
}

/// What a write that lost to concurrent writes on every attempt answers
/// (logged): nothing of it was written, and the same call may well
/// succeed now.
fn lost_to_contention(what: &str, attempts: u32) -> ToolError {
    tracing::warn!(
        target: "zm_store",
        write = what,
        attempts,
        "a write lost to concurrent writes on every attempt: answered conflict"
    );
    ToolError::conflict(
        "The write collided with concurrent writes and was not applied; nothing was written, retry it.",
    )
}

/// Run `attempt`, a write that is one transaction of its own and does
/// nothing but it (team administration, a rule's change from the
/// dashboard, a sign-in's session, the OAuth token endpoint's grants and
/// revocations), again from scratch when it lost to concurrent writes (a
/// PostgreSQL deadlock's victim, a serialization failure), as the tool
/// service runs a tool's write again: after a short jittered wait, up to
/// [`WRITE_ATTEMPTS`] attempts in all; one that loses every time answers
/// `conflict` (in the caller's error type: the OAuth token endpoint's
/// answers it as `server_error`). Any other outcome is the attempt's.
/// `what` names the write in the log.
pub(crate) async fn rerun_on_contention<T, E, F>(
    what: &str,
    attempt: impl Fn() -> F,
) -> Result<T, E>
where
    E: From<ToolError>,
    F: Future<Output = Result<T, E>>,
{
    let mut n = 1;
    loop {
        let (result, lost) = crate::db::watch_contention(attempt()).await;
        match result {
            Err(_) if lost && n < WRITE_ATTEMPTS => {
                back_off(n).await;
                n += 1;
            }
            Err(_) if lost => return Err(lost_to_contention(what, n).into()),
            other => return other,
        }
    }
}

fn elapsed_ms(started: Instant) -> i64 {
    i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX)
}

/// The tool service. Cheap to clone; clones share their metrics.
#[derive(Debug, Clone)]
pub struct ToolService {
    store: Store,
    metrics: std::sync::Arc<ToolMetrics>,
}

impl ToolService {
    pub fn new(store: Store) -> Self {
        ToolService {
            store,
            metrics: std::sync::Arc::new(ToolMetrics::default()),
        }
    }

    /// The store behind the service (authentication, resources, operators).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Calls, errors and latency of every tool, by transport.
    pub fn metrics(&self) -> &ToolMetrics {
        &self.metrics
    }

    /// Run `tool` on raw JSON arguments: authorise, validate, handle,
    /// audit, measure. The one entry point of MCP and REST.
    pub async fn call(
        &self,
        caller: &Caller,
        tool: ToolName,
        raw: &Value,
    ) -> Result<ToolOutput, ToolError> {
        let out = self.answer(caller, tool, raw).await;
        self.note(caller, &out).await;
        out
    }

    /// The call's answer: authorised, validated, handled, audited,
    /// measured.
    async fn answer(
        &self,
        caller: &Caller,
        tool: ToolName,
        raw: &Value,
    ) -> Result<ToolOutput, ToolError> {
        macro_rules! dispatch {
            ($($marker:ident)*) => {
                match tool {
                    $(ToolName::$marker => self
                        .call_json::<tool::$marker>(caller, raw, None)
                        .await
                        .map(ToolOutput::$marker),)*
                }
            };
        }
        zm_contracts::for_each_tool!(dispatch)
    }

    /// What the Insight page counts of an answer: a recall's hits, noted
    /// after the read has answered and written at most every 30 s (see
    /// `crate::usage`; that write carries every user's counts since the
    /// last, so it is never cut short by a cancellation).
    async fn note(&self, caller: &Caller, out: &Result<ToolOutput, ToolError>) {
        if let Ok(ToolOutput::Recall(r)) = out {
            let ids: Vec<&str> = r.memories.iter().map(|m| m.id.as_str()).collect();
            self.store.note_recalled(caller, &ids).await;
        }
    }

    /// [`Self::call`] for a client that may cancel the call (MCP's
    /// `notifications/cancelled`, or its session ending): `cancelled`
    /// completes when it does. A **read** tool stops where it is (its
    /// work is dropped: a read writes nothing) and answers `None`, counted
    /// in `zm_tool_cancelled_total`; one that answered first is noted as
    /// [`Self::call`] notes it, whatever comes after. A **write** tool runs to its end
    /// whatever the client does, so that it is either applied and audited
    /// in full or not at all by its own outcome, never cut between the
    /// two by a message racing it; its answer goes unread.
    pub async fn call_unless_cancelled(
        &self,
        caller: &Caller,
        tool: ToolName,
        raw: &Value,
        cancelled: impl Future<Output = ()>,
    ) -> Option<Result<ToolOutput, ToolError>> {
        if tool.access() != Access::Read {
            return Some(self.write_to_the_end(caller, tool, raw).await);
        }
        tokio::select! {
            // A call cancelled before it began does not begin.
            biased;
            () = cancelled => {
                self.metrics.record_cancelled(tool, caller);
                tracing::debug!(target: "zm_store", %tool, "a read call was cancelled by its client");
                None
            }
            out = self.answer(caller, tool, raw) => {
                self.note(caller, &out).await;
                Some(out)
            }
        }
    }

    /// A write on a task of its own ([`Store::spawn_write`]): it runs to its
    /// end whatever becomes of the request that sent it, [`Store::close`]
    /// waits for it, and no more than [`crate::store::WRITES_IN_FLIGHT_MAX`] run
    /// at once (beyond that the write is `rate_limited`, nothing started),
    /// so a client that sends writes and hangs up cannot pile them up. A
    /// panic in it is an `internal` answer, logged here.
    async fn write_to_the_end(
        &self,
        caller: &Caller,
        tool: ToolName,
        raw: &Value,
    ) -> Result<ToolOutput, ToolError> {
        let (service, owned, input) = (self.clone(), caller.clone(), raw.clone());
        let Some(task) = self
            .store
            .spawn_write(async move { service.call(&owned, tool, &input).await })
        else {
            return Err(ToolError::rate_limited(
                "Too many writes are still running on this server; retry shortly.",
            ));
        };
        match task.await {
            Ok(out) => out,
            Err(e) => {
                tracing::error!(target: "zm_store", %tool, error = %e, "a write's task ended without an answer");
                Err(ToolError::internal())
            }
        }
    }

    /// Run a tool on an already typed input (the same pipeline minus the
    /// JSON validation step): for Rust callers such as the importer.
    ///
    /// A write whose transaction lost to concurrent writes on PostgreSQL
    /// (a deadlock victim, a serialization failure: nothing of it was
    /// written) is run again from scratch in a new transaction after a
    /// short jittered wait, up to [`WRITE_ATTEMPTS`] attempts in all; one
    /// that loses every time answers `conflict`. The call is audited and
    /// measured once, whatever the number of attempts.
    pub async fn run<T: Handler>(
        &self,
        caller: &Caller,
        input: T::Input,
    ) -> Result<T::Output, ToolError> {
        let started = Instant::now();
        let result = match authorize(caller, T::TOOL) {
            Ok(()) => self.execute::<T>(caller, input, None).await,
            Err(e) => Err(e),
        };
        self.metrics.record(T::TOOL, caller, &result, started);
        result
    }

    /// An edit: `remember` `input` (which links `supersedes` to
    /// `replaces`) and retire `replaces` in the same transaction, or write
    /// nothing. Where a plain `remember` skips a `supersedes` target that
    /// is already retired (the contract's rule for links), an edit that
    /// finds its memory superseded or forgotten meanwhile (another tab, an
    /// agent) answers `conflict`: two edits of one version never both land
    /// as two live versions. Text identical to the memory's own is no
    /// change and answers that memory.
    pub async fn edit(
        &self,
        caller: &Caller,
        raw: &Value,
        replaces: &MemoryId,
    ) -> Result<zm_contracts::RememberOutput, ToolError> {
        self.call_json::<tool::Remember>(caller, raw, Some(replaces))
            .await
    }

    /// Run many calls of one write tool in **one** transaction (one commit,
    /// one fsync): each call inside its own savepoint, so a refused call
    /// (validation, the content guard, a quota) leaves nothing and the
    /// others still land. Each call is authorised, audited (in the batch's
    /// transaction) and measured like a single call; an item that lost to
    /// concurrent writes is run again inside the batch, as [`Self::run`]
    /// runs a call again. The outer `Err` means the batch's transaction
    /// itself failed: then nothing of it was written (`conflict` when it
    /// lost to concurrent writes: the same batch may be run again). Read
    /// tools are refused (`internal`): they need no batch.
    pub async fn run_batch<T: Handler>(
        &self,
        caller: &Caller,
        inputs: Vec<T::Input>,
    ) -> Result<Vec<Result<T::Output, ToolError>>, ToolError> {
        let access = T::TOOL.access();
        if access == Access::Read {
            tracing::error!(target: "zm_store", tool = T::NAME, "a read tool was batched");
            return Err(ToolError::internal());
        }
        if let Err(e) = authorize(caller, T::TOOL) {
            let started = Instant::now();
            let refused: Result<T::Output, ToolError> = Err(e.clone());
            for _ in &inputs {
                self.metrics.record(T::TOOL, caller, &refused, started);
            }
            return Ok(inputs.iter().map(|_| Err(e.clone())).collect());
        }
        let started = Instant::now();
        let payloads: Vec<Value> = inputs
            .iter()
            .map(|i| audit_payload(&serde_json::to_value(i).unwrap_or(Value::Null)))
            .collect();
        let (batch, lost) =
            crate::db::watch_contention(self.batch_in_one_tx::<T>(caller, inputs, &payloads)).await;
        match batch {
            // Measured once committed: an item counts as what it answered.
            Ok(items) => Ok(items
                .into_iter()
                .map(|(result, at)| {
                    self.metrics.record(T::TOOL, caller, &result, at);
                    result
                })
                .collect()),
            // Nothing of the batch was written (its audit rows neither):
            // each call is audited and measured as refused, on its own.
            Err(e) => {
                let e = if lost {
                    lost_to_contention(T::NAME, 1)
                } else {
                    e
                };
                let refused: Result<T::Output, ToolError> = Err(e.clone());
                for payload in &payloads {
                    let entry = AuditEntry {
                        command: T::NAME,
                        payload,
                        outcome: Err(&e),
                        duration_ms: elapsed_ms(started),
                    };
                    self.store.audit(caller, &entry).await;
                    self.metrics.record(T::TOOL, caller, &refused, started);
                }
                Err(e)
            }
        }
    }

    /// The body of [`ToolService::run_batch`]: its one transaction. An item
    /// that lost to concurrent writes (PostgreSQL) is rolled back to its
    /// savepoint, which also ends the transaction's aborted state, and run
    /// again like a single call.
    /// Each item's answer comes with when it started, for the metrics.
    async fn batch_in_one_tx<T: Handler>(
        &self,
        caller: &Caller,
        inputs: Vec<T::Input>,
        payloads: &[Value],
    ) -> Result<Vec<(Result<T::Output, ToolError>, Instant)>, ToolError> {
        use crate::db::DbResult;
        let access = T::TOOL.access();
        let mut tx = self
            .store
            .write_tx_of(Some(caller.user_id.as_str()))
            .await?;
        let mut results = Vec::with_capacity(inputs.len());
        let mut placed = Vec::new();
        for (input, payload) in inputs.into_iter().zip(payloads) {
            let started = Instant::now();
            sqlx::query("SAVEPOINT zm_batch_item")
                .execute(&mut *tx)
                .await
                .db("savepoint")?;
            let mut attempt = 1;
            let result = loop {
                let (result, lost) = crate::db::watch_contention(async {
                    let mut cx = Cx::in_batch(&self.store, caller, access, &mut tx);
                    let out = T::handle(&self.store, &mut cx, input.clone()).await?;
                    Ok((out, std::mem::take(&mut cx.placed)))
                })
                .await;
                if result.is_err() {
                    sqlx::query("ROLLBACK TO SAVEPOINT zm_batch_item")
                        .execute(&mut *tx)
                        .await
                        .db("rollback to savepoint")?;
                }
                match result {
                    Ok((out, mut changed)) => {
                        placed.append(&mut changed);
                        break Ok(out);
                    }
                    Err(_) if lost && attempt < WRITE_ATTEMPTS => {
                        back_off(attempt).await;
                        attempt += 1;
                    }
                    Err(_) if lost => break Err(lost_to_contention(T::NAME, attempt)),
                    Err(e) => break Err(e),
                }
            };
            let entry = AuditEntry {
                command: T::NAME,
                payload,
                outcome: result.as_ref().map(|_| ()),
                duration_ms: elapsed_ms(started),
            };
            self.store.audit_in(&mut tx, caller, &entry).await?;
            sqlx::query("RELEASE SAVEPOINT zm_batch_item")
                .execute(&mut *tx)
                .await
                .db("release savepoint")?;
            results.push((result, started));
        }
        tx.commit().await.db("commit batch")?;
        self.store
            .note_writes(u64::try_from(results.len()).unwrap_or(u64::MAX));
        self.store.vector_meta_changed(&placed).await;
        Ok(results)
    }

    async fn call_json<T: Handler>(
        &self,
        caller: &Caller,
        raw: &Value,
        replaces: Option<&MemoryId>,
    ) -> Result<T::Output, ToolError> {
        let started = Instant::now();
        let result = match authorize(caller, T::TOOL) {
            Err(e) => Err(e),
            Ok(()) => match parse_input::<T::Input>(raw) {
                Ok(input) => self.execute::<T>(caller, input, replaces).await,
                Err(e) => {
                    // A write attempt that does not validate is audited too
                    // (nothing else was written).
                    if T::TOOL.access() != Access::Read {
                        let entry = AuditEntry {
                            command: T::NAME,
                            payload: &audit_payload(raw),
                            outcome: Err(&e),
                            duration_ms: 0,
                        };
                        self.store.audit(caller, &entry).await;
                    }
                    Err(e)
                }
            },
        };
        self.metrics.record(T::TOOL, caller, &result, started);
        result
    }

    /// Handle, then audit a write in its own transaction; a write that
    /// lost to concurrent writes is run again from scratch (see
    /// [`ToolService::run`]).
    async fn execute<T: Handler>(
        &self,
        caller: &Caller,
        input: T::Input,
        replaces: Option<&MemoryId>,
    ) -> Result<T::Output, ToolError> {
        let access = T::TOOL.access();
        if access == Access::Read {
            let mut cx = Cx::new(&self.store, caller, access);
            return T::handle(&self.store, &mut cx, input).await;
        }
        // The first attempt's payload and start: one call, one audit row.
        let payload = audit_payload(&serde_json::to_value(&input).unwrap_or(Value::Null));
        let started = Instant::now();
        // A failed attempt wrote nothing (its transaction was rolled back):
        // one that lost to concurrent writes runs again from scratch.
        let payload = &payload;
        let failure = match rerun_on_contention(T::NAME, move || {
            self.write_attempt::<T>(caller, input.clone(), payload, started, replaces)
        })
        .await
        {
            Ok((out, placed)) => {
                self.store.note_writes(1);
                // The vector index pre-filters by placement: this
                // instance's own changes are seen at once (other
                // instances' within the embedder's refresh).
                self.store.vector_meta_changed(&placed).await;
                return Ok(out);
            }
            Err(failure) => failure,
        };
        // The refusal is audited on its own.
        let entry = AuditEntry {
            command: T::NAME,
            payload,
            outcome: Err(&failure),
            duration_ms: elapsed_ms(started),
        };
        self.store.audit(caller, &entry).await;
        Err(failure)
    }

    /// One attempt at a write call in a transaction of its own: handle,
    /// audit, commit. On failure the context is dropped, which rolls the
    /// transaction back: nothing of the attempt remains.
    async fn write_attempt<T: Handler>(
        &self,
        caller: &Caller,
        input: T::Input,
        payload: &Value,
        started: Instant,
        replaces: Option<&MemoryId>,
    ) -> Result<(T::Output, Vec<MemoryId>), ToolError> {
        let mut cx = Cx::new(&self.store, caller, T::TOOL.access());
        cx.replaces = replaces;
        let out = T::handle(&self.store, &mut cx, input).await?;
        let entry = AuditEntry {
            command: T::NAME,
            payload,
            outcome: Ok(()),
            duration_ms: elapsed_ms(started),
        };
        let tx = cx.tx().await?;
        self.store.audit_in(tx, caller, &entry).await?;
        let placed = cx.commit().await?;
        Ok((out, placed))
    }
}

/// Policy: the caller's grant must cover the tool's declared access. An
/// `Erase` tool also needs the `account:delete` scope, so an agent holding
/// an ordinary write token (say, a prompt-injected one) cannot erase the
/// account. The one place this is decided: [`authorize`] refuses by it,
/// and an HTTP refusal names the scope in its `insufficient_scope`
/// challenge (RFC 6750 §3.1).
pub fn missing_scope(caller: &Caller, tool: ToolName) -> Option<&'static str> {
    let access = tool.access();
    if access != Access::Read && !caller.grant.can_write() {
        return Some(crate::identity::SCOPE_WRITE);
    }
    if access == Access::Erase && !caller.grant.can_delete_account() {
        return Some(crate::identity::SCOPE_ACCOUNT_DELETE);
    }
    None
}

/// Every scope a token needs to call `tool`.
pub fn required_scopes(tool: ToolName) -> &'static [&'static str] {
    use crate::identity::{SCOPE_ACCOUNT_DELETE, SCOPE_READ, SCOPE_WRITE};
    match tool.access() {
        Access::Read => &[SCOPE_READ],
        Access::Write => &[SCOPE_READ, SCOPE_WRITE],
        Access::Erase => &[SCOPE_READ, SCOPE_WRITE, SCOPE_ACCOUNT_DELETE],
    }
}

/// The scopes a step-up challenge for `tool` names to a token of `kind`
/// (RFC 6750 §3.1): every scope the call needs, or `None` when no token
/// of that kind is ever granted them all (an OAuth sign-in never holds
/// `account:delete`), so that re-authorizing could not help.
pub fn step_up_scopes(
    kind: crate::identity::TokenKind,
    tool: ToolName,
) -> Option<&'static [&'static str]> {
    use crate::identity::TokenKind;
    let needed = required_scopes(tool);
    match kind {
        TokenKind::Pat => Some(needed),
        TokenKind::OauthAccess | TokenKind::OauthRefresh => needed
            .iter()
            .all(|s| crate::oauth::OAUTH_SCOPES.contains(s))
            .then_some(needed),
    }
}

fn authorize(caller: &Caller, tool: ToolName) -> Result<(), ToolError> {
    match missing_scope(caller, tool) {
        None => Ok(()),
        Some(crate::identity::SCOPE_WRITE) => Err(ToolError::forbidden(format!(
            "This token is read-only (mcp:read); {tool} needs mcp:write."
        ))),
        Some(_) => Err(ToolError::forbidden(format!(
            "{tool} needs the account:delete scope, which this token lacks; \
             create a token with `zero-memory token create --allow-account-delete`."
        ))),
    }
}

#[cfg(test)]
mod batch_failure_tests {
    use super::*;
    use zm_contracts::catalogue::tool;
    use zm_contracts::{ErrorCode, ImportMemoryInput, parse_input};

    fn import(content: &str, hash: &str) -> ImportMemoryInput {
        parse_input(&serde_json::json!({
            "content": content,
            "kind": "fact",
            "target": "personal",
            "source_path": "notes/batch.md",
            "source_hash": hash,
        }))
        .expect("a valid import")
    }

    /// A batch whose transaction fails after its first call was handled
    /// (SQLite: a trigger refuses the second call's audit row) wrote
    /// nothing, so no call of it counts as a success: each is measured as
    /// the batch's refusal.
    #[tokio::test]
    async fn a_failed_batch_counts_no_call_as_done() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "batch-fail").await;
        sqlx::raw_sql(
            "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log WHEN NEW.payload LIKE '%fail-2%' \
             BEGIN SELECT RAISE(ABORT, 'audit refused'); END",
        )
        .execute(&store.pool)
        .await
        .expect("the trigger");
        let tools = ToolService::new(store.clone());
        let out = tools
            .run_batch::<tool::ImportMemory>(
                &caller,
                vec![
                    import("First batch fact.", "fail-1"),
                    import("Second batch fact.", "fail-2"),
                ],
            )
            .await;
        assert_eq!(out.map(|_| ()), Err(ToolError::internal()));
        let memories: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM memories")
            .fetch_one(&store.pool)
            .await
            .expect("count");
        assert_eq!(memories, 0, "nothing of the batch was written");
        let counted = |code| {
            tools
                .metrics()
                .count(ToolName::ImportMemory, caller.transport, code)
        };
        assert_eq!(
            (counted(None), counted(Some(ErrorCode::Internal))),
            (0, 2),
            "both calls counted as refused"
        );
    }
}
