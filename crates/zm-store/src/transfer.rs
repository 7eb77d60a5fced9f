//! Moving data around: `share`, `move_memories`, `import_memory`,
//! `export_memories`, `delete_account`.

use serde_json::json;
use zm_contracts::scope;
use zm_contracts::{
    AuthorKind, DeleteAccountInput, DeleteAccountOutput, ErrorCode, ExportMemoriesInput,
    ExportMemoriesOutput, IdKind, ImportMemoryInput, ImportMemoryOutput, ImportTarget, MemoryId,
    MoveFailure, MoveMemoriesInput, MoveMemoriesOutput, ShareInput, ShareOutput, ToolError,
    TranslationStatus, UserId, Visibility, validate::field_error,
};

use crate::cursor::{self, ExportPosition};
use crate::db::DbResult;
use crate::guard;
use crate::memories::{OwnedMemory, content_hash};
use crate::rows::{FromAnyRow, col};
use crate::scopes::{ReadSet, canonical_path, explicit_read_set, push_read_set};
use crate::service::Cx;
use crate::sql::Sql;
use crate::store::{Caller, Store};

/// Why one memory could not move or be shared.
enum Refusal {
    NotFound,
    NotOwner,
    Invalidated,
    /// Shared where the caller may no longer write (`may_change_own_in`).
    ReadOnly(ToolError),
}

/// How many of `$1`'s ledger rows name the item `$2` and a memory still
/// here (or none, for an item that stored nothing): an item imported
/// before, which an import skips.
const IMPORTED_BEFORE: &str = "SELECT COUNT(*) FROM imports i WHERE i.owner_id = $1 AND i.source_hash = $2 \
     AND (i.memory_id IS NULL OR EXISTS (SELECT 1 FROM memories m WHERE m.id = i.memory_id))";

impl Store {
    /// The caller's own live memory `id`, where they may write, held for
    /// the move: its role is checked where a first read found it, and
    /// again where it is once held (`hold_own_rechecked`, as a forget or
    /// a supersede does): on PostgreSQL another share or move of it, a
    /// retirement or a hand-over may have committed in between.
    async fn check_movable(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        id: &str,
    ) -> Result<Result<OwnedMemory, Refusal>, ToolError> {
        let row = sqlx::query(
            "SELECT owner_id, kind, scope, visibility, invalidated_at FROM memories WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await
        .db("movable")?;
        let Some(row) = row else {
            return Ok(Err(Refusal::NotFound));
        };
        let row = OwnedMemory::from_row(&row)?;
        if row.owner_id != caller.user_id {
            return Ok(Err(self.not_movable_by(tx, caller, id).await?));
        }
        if row.invalidated_at.is_some() {
            return Ok(Err(Refusal::Invalidated));
        }
        let read_only = |e: ToolError| {
            if e.code == ErrorCode::Forbidden {
                Ok(Err(Refusal::ReadOnly(e)))
            } else {
                Err(e)
            }
        };
        if let Err(e) = self
            .may_change_own_in(tx, caller, &row.scope, row.visibility)
            .await
        {
            return read_only(e);
        }
        let held = match self
            .hold_own_rechecked(tx, caller, id, &row.scope, row.visibility)
            .await
        {
            Ok(Some(held)) => held,
            // Handed over meanwhile.
            Ok(None) => return Ok(Err(self.not_movable_by(tx, caller, id).await?)),
            Err(e) => return read_only(e),
        };
        if held.invalidated_at.is_some() {
            return Ok(Err(Refusal::Invalidated));
        }
        Ok(Ok(held))
    }

    /// Why a memory that is not the caller's does not move: visible to
    /// them, not theirs; invisible, not found (as a foreign id reads).
    async fn not_movable_by(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        id: &str,
    ) -> Result<Refusal, ToolError> {
        Ok(if self.can_read_memory(&mut *tx, caller, id).await? {
            Refusal::NotOwner
        } else {
            Refusal::NotFound
        })
    }

    /// The shareable scope a share/move targets, writable by the caller.
    async fn share_target(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        path: &str,
        field: &str,
    ) -> Result<String, ToolError> {
        let path = canonical_path(caller, path);
        if !scope::is_shareable(&path) {
            return Err(field_error(
                field,
                "not a project or team scope: share and move target proj.… or team.… scopes",
            ));
        }
        self.writable_path(tx, caller, &path).await
    }

    /// Move a memory `check_movable` holds into `target`, shared.
    async fn move_one(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        id: &str,
        target: &str,
    ) -> Result<(), ToolError> {
        let done = sqlx::query("UPDATE memories SET scope = $1, visibility = $2, shared_at = $3, shared_by = $4 WHERE id = $5 AND owner_id = $4 AND invalidated_at IS NULL")
            .bind(target)
            .bind(Visibility::Shared.as_str())
            .bind(self.now())
            .bind(&caller.user_id)
            .bind(id)
            .execute(&mut *tx)
            .await
            .db("move memory")?;
        if done.rows_affected() != 1 {
            // Held and checked in this transaction: it cannot have gone.
            tracing::error!(memory = id, "a held memory did not move");
            return Err(ToolError::internal());
        }
        Ok(())
    }

    /// Widen one memory into a shared project or team scope.
    pub(crate) async fn share(
        &self,
        cx: &mut Cx<'_>,
        input: ShareInput,
    ) -> Result<ShareOutput, ToolError> {
        let caller = cx.caller;
        let id = input.memory_id.as_str();
        let tx = cx.tx().await?;
        let target = self
            .share_target(tx, caller, input.scope.as_str(), "scope")
            .await?;
        match self.check_movable(tx, caller, id).await? {
            Err(Refusal::NotFound) => {
                return Err(ToolError::not_found(format!("Memory {id} not found.")));
            }
            Err(Refusal::NotOwner) => {
                return Err(ToolError::conflict(format!(
                    "Memory {id} is not yours to share."
                )));
            }
            Err(Refusal::Invalidated) => {
                return Err(ToolError::conflict(format!("Memory {id} is invalidated.")));
            }
            Err(Refusal::ReadOnly(e)) => return Err(e),
            Ok(placement) => {
                if !placement.is_shared_in(&target) {
                    self.move_one(tx, caller, id, &target).await?;
                    cx.placement_changed(id);
                }
            }
        }
        Ok(ShareOutput {
            memory_id: input.memory_id,
            scope: target,
            shared: true,
        })
    }

    /// Move many memories into one project or team scope.
    pub(crate) async fn move_memories(
        &self,
        cx: &mut Cx<'_>,
        input: MoveMemoriesInput,
    ) -> Result<MoveMemoriesOutput, ToolError> {
        let caller = cx.caller;
        let tx = cx.tx().await?;
        // A project the target names is created (scope, membership, hint
        // binding) only when a memory moves into it: when none does, the
        // call rolls back to here.
        sqlx::query("SAVEPOINT zm_move_target")
            .execute(&mut *tx)
            .await
            .db("savepoint")?;
        let target_path = match (&input.scope, &input.project_hint) {
            (Some(s), _) => s.as_str().to_string(),
            // Refused as `remember` refuses a hint that names no project.
            (None, Some(h)) => self.hint_for_write(tx, caller, h).await?,
            (None, None) => {
                return Err(field_error(
                    "scope",
                    "pass scope (a proj.… or team.… path) or project_hint",
                ));
            }
        };
        let field = if input.scope.is_some() {
            "scope"
        } else {
            "project_hint"
        };
        let target = self.share_target(tx, caller, &target_path, field).await?;
        // Each memory once, held in id order (as every write holds memory
        // rows: two moves of overlapping lists wait for each other instead
        // of deadlocking), answered in the order the caller listed them.
        let mut listed = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for mid in input.memory_ids {
            if seen.insert(mid.as_str().to_string()) {
                listed.push(mid);
            }
        }
        let mut order: Vec<usize> = (0..listed.len()).collect();
        order.sort_by(|&a, &b| listed[a].as_str().cmp(listed[b].as_str()));
        let mut outcome: Vec<Option<Result<(), (ErrorCode, String)>>> = vec![None; listed.len()];
        let mut changed = Vec::new();
        for i in order {
            let mid = &listed[i];
            outcome[i] = Some(match self.check_movable(tx, caller, mid.as_str()).await? {
                Ok(placement) => {
                    // Already shared there: nothing to change (a repeat is a no-op).
                    if !placement.is_shared_in(&target) {
                        self.move_one(tx, caller, mid.as_str(), &target).await?;
                        changed.push(mid.clone());
                    }
                    Ok(())
                }
                Err(r) => Err(match r {
                    Refusal::NotFound => (ErrorCode::NotFound, "not found".into()),
                    // As `share` answers it.
                    Refusal::NotOwner => (ErrorCode::Conflict, "not the owner".into()),
                    Refusal::Invalidated => (ErrorCode::Conflict, "invalidated".into()),
                    Refusal::ReadOnly(e) => (e.code, e.message),
                }),
            });
        }
        if changed.is_empty() {
            sqlx::query("ROLLBACK TO SAVEPOINT zm_move_target")
                .execute(&mut *tx)
                .await
                .db("rollback to savepoint")?;
        }
        sqlx::query("RELEASE SAVEPOINT zm_move_target")
            .execute(&mut *tx)
            .await
            .db("release savepoint")?;
        let mut moved = Vec::new();
        let mut failed = Vec::new();
        for (mid, out) in listed.into_iter().zip(outcome) {
            match out {
                Some(Ok(())) => moved.push(mid),
                Some(Err((code, error))) => failed.push(MoveFailure {
                    memory_id: mid,
                    code,
                    error,
                }),
                None => return Err(ToolError::internal()),
            }
        }
        for id in &changed {
            cx.placement_changed(id.as_str());
        }
        Ok(MoveMemoriesOutput {
            scope: target,
            moved,
            failed,
        })
    }

    /// The answer to an item imported before (its ledger row): skipped,
    /// naming the earlier memory while the caller can still read it.
    async fn skipped_import(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        hash: &str,
    ) -> Result<ImportMemoryOutput, ToolError> {
        // The ledger row of an earlier import (its memory may be gone).
        let prior: Option<String> = sqlx::query_scalar(
            "SELECT memory_id FROM imports WHERE owner_id = $1 AND source_hash = $2",
        )
        .bind(&caller.user_id)
        .bind(hash)
        .fetch_one(&mut *tx)
        .await
        .db("import ledger")?;
        // Named only while the caller may still read it: a memory
        // moved into a team's project and handed over when they left
        // is someone else's now, and a foreign id reads as absent.
        let readable = match prior {
            Some(id) => {
                let mut sql = crate::sql::Sql::new("SELECT m.id FROM memories m WHERE m.id = ");
                sql.bind_str(&id).push(" AND ");
                crate::scopes::push_visible(&mut sql, "m", &caller.user_id);
                sql.query()
                    .fetch_optional(&mut *tx)
                    .await
                    .db("import ledger memory")?
                    .map(|_| id)
            }
            None => None,
        };
        Ok(ImportMemoryOutput {
            skipped: true,
            memory_id: readable.map(MemoryId::from_trusted),
            deduplicated: None,
        })
    }

    /// Has `owner` imported the item `source_hash` names before, and is
    /// what it became still here ([`Store::import_memory`] skips it)? A
    /// look-up only: the importer asks it of a line it would otherwise
    /// refuse before the tool sees it (text over the limit).
    pub async fn imported_before(&self, owner: &str, source_hash: &str) -> Result<bool, ToolError> {
        let seen: i64 = sqlx::query_scalar(IMPORTED_BEFORE)
            .bind(owner)
            .bind(source_hash.trim())
            .fetch_one(&self.pool)
            .await
            .db("import seen")?;
        Ok(seen > 0)
    }

    /// The live memory an earlier import of the item `source_hash` stored
    /// for `owner`, as that import left it: one the import itself created
    /// (its provenance names that item), still private in the owner's
    /// personal or core scope where imports put memories (not moved or
    /// shared since), standing for no other item of the ledger (an
    /// identical item imported after it found it there) and carrying no
    /// promoted rule. Never a memory of theirs the import only found
    /// already there (an identical one they wrote).
    pub async fn imported_copy(
        &self,
        owner: &str,
        source_hash: &str,
    ) -> Result<Option<MemoryId>, ToolError> {
        let hash = source_hash.trim();
        let row = sqlx::query(
            "SELECT m.id AS id, m.source AS source, m.scope AS scope, m.visibility AS visibility \
             FROM imports i JOIN memories m ON m.id = i.memory_id \
             WHERE i.owner_id = $1 AND i.source_hash = $2 AND m.owner_id = $1 AND m.invalidated_at IS NULL \
             AND NOT EXISTS (SELECT 1 FROM imports j WHERE j.owner_id = i.owner_id \
                 AND j.memory_id = i.memory_id AND j.source_hash <> i.source_hash) \
             AND NOT EXISTS (SELECT 1 FROM rules r WHERE r.memory_id = m.id AND r.status = $3)",
        )
        .bind(owner)
        .bind(hash)
        .bind(crate::rules::RuleState::Promoted.as_str())
        .fetch_optional(&self.pool)
        .await
        .db("imported copy")?;
        let Some(row) = row else {
            return Ok(None);
        };
        let source: Option<String> = col(&row, "source")?;
        let made_by_it = source
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .is_some_and(|s| s["kind"] == "import" && s["hash"] == hash);
        let scope: String = col(&row, "scope")?;
        let visibility: String = col(&row, "visibility")?;
        let owner = Caller::new(owner.to_string());
        let where_put = scope == owner.personal_scope() || scope == owner.core_scope();
        if !(made_by_it && where_put && visibility == Visibility::Private.as_str()) {
            return Ok(None);
        }
        Ok(Some(MemoryId::from_trusted(col::<String>(&row, "id")?)))
    }

    /// Import one memory deterministically; idempotent by `source_hash`.
    pub(crate) async fn import_memory(
        &self,
        cx: &mut Cx<'_>,
        input: ImportMemoryInput,
    ) -> Result<ImportMemoryOutput, ToolError> {
        let caller = cx.caller;
        // The provenance is stored and shown with the memory (its export,
        // its resource, a teammate's read) and `source_hash` is kept in
        // the audit log, a skipped item's too: no secret rides in through
        // it either.
        let mut provenance = vec![
            ("source_path".to_string(), input.source_path.clone()),
            ("source_hash".to_string(), input.source_hash.clone()),
        ];
        if let Some(t) = &input.source_tool {
            provenance.push(("source_tool".into(), t.clone()));
        }
        if let Some(hit) =
            guard::check_fields(provenance.iter().map(|(k, v)| (k.clone(), v.as_str())))
        {
            return Err(guard::rejection(&hit));
        }
        // The text is checked before the write takes its turn (an item too
        // long is `validation_failed` at once, not a wait for a busy
        // database). A refusal holds only for an item to store: one
        // imported before is skipped below whatever its size or words, so
        // a re-run after the limit was lowered, or the content guard
        // learned a new pattern, still says "imported before" of what is
        // already here. Only a refused item asks the ledger first.
        let check_text = || -> Result<(), ToolError> {
            self.limits.check_text([
                ("content", Some(input.content.as_str())),
                ("verbatim", input.verbatim.as_deref()),
            ])?;
            let mut fields = vec![("content", input.content.trim())];
            if let Some(v) = &input.verbatim {
                fields.push(("verbatim", v.as_str()));
            }
            match guard::check_fields(fields.into_iter().map(|(k, v)| (k.to_string(), v))) {
                Some(hit) => Err(guard::rejection(&hit)),
                None => Ok(()),
            }
        };
        let hint_missing =
            matches!(input.target, ImportTarget::Project) && input.project_hint.is_none();
        let refused = match check_text() {
            Ok(()) => None,
            Err(e)
                if !hint_missing
                    && self
                        .imported_before(&caller.user_id, &input.source_hash)
                        .await? =>
            {
                Some(e)
            }
            Err(e) => return Err(e),
        };
        let tx = cx.tx().await?;
        let hash = input.source_hash.trim().to_string();
        // An item imported before is skipped before its hint is resolved:
        // a re-run creates no project and binds no hint (the claim below
        // still decides between two imports of one item at once). An item
        // whose memory no longer exists anywhere (it went into a team's
        // scope and was purged with the deleted team) is imported anew:
        // the ledger says what is here, and it is not. A forgotten memory
        // still exists (restore it); one handed to someone else is still
        // theirs.
        let seen: i64 = sqlx::query_scalar(IMPORTED_BEFORE)
            .bind(&caller.user_id)
            .bind(&hash)
            .fetch_one(&mut *tx)
            .await
            .db("import seen")?;
        if seen > 0 && !hint_missing {
            return self.skipped_import(tx, caller, &hash).await;
        }
        // Seen before the turn, gone by the write's own look: refused.
        if let Some(e) = refused {
            return Err(e);
        }
        let content = input.content.trim().to_string();
        let scope = match input.target {
            ImportTarget::Personal => caller.personal_scope(),
            ImportTarget::Core => caller.core_scope(),
            ImportTarget::Project => {
                let Some(h) = &input.project_hint else {
                    return Err(field_error(
                        "project_hint",
                        "is required when target is project",
                    ));
                };
                // A hint that names no project degrades to personal.
                self.bind_hint(tx, caller, h)
                    .await?
                    .filter(|s| scope::is_shareable(s))
                    .unwrap_or_else(|| caller.personal_scope())
            }
        };
        let now = self.now();
        // The owner's writes first, as `remember` takes them before any row
        // it writes: a batch holding this lock and a single import holding
        // a ledger row would otherwise wait on each other (PostgreSQL).
        self.hold_writes_of(tx, &caller.user_id).await?;
        // The ledger row of a memory that exists nowhere goes (under the
        // owner's lock, as every ledger row is taken): the claim below
        // takes its place.
        sqlx::query(
            "DELETE FROM imports WHERE owner_id = $1 AND source_hash = $2 AND memory_id IS NOT NULL \
             AND NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = imports.memory_id)",
        )
        .bind(&caller.user_id)
        .bind(&hash)
        .execute(&mut *tx)
        .await
        .db("import ledger of an erased memory")?;
        // Claim the ledger row first: the same item imported twice at once
        // (PostgreSQL) waits here for the first import and is skipped,
        // instead of failing on the ledger's key after inserting a copy.
        let claimed = sqlx::query(
            "INSERT INTO imports (owner_id, source_hash, memory_id, created_at) VALUES ($1, $2, NULL, $3) \
             ON CONFLICT (owner_id, source_hash) DO NOTHING",
        )
        .bind(&caller.user_id)
        .bind(&hash)
        .bind(now)
        .execute(&mut *tx)
        .await
        .db("import claim")?;
        if claimed.rows_affected() == 0 {
            return self.skipped_import(tx, caller, &hash).await;
        }
        let chash = content_hash(&content);
        let existing: Option<String> = sqlx::query_scalar("SELECT id FROM memories WHERE owner_id = $1 AND scope = $2 AND content_hash = $3 AND kind = $4 AND invalidated_at IS NULL ORDER BY seq LIMIT 1")
            .bind(&caller.user_id)
            .bind(&scope)
            .bind(&chash)
            .bind(input.kind.as_str())
            .fetch_optional(&mut *tx)
            .await
            .db("import dedup")?;
        let deduplicated = existing.is_some();
        let id = match existing {
            Some(id) => id,
            None => {
                let id = IdKind::Memory.generate();
                let mut source = json!({"kind": "import", "path": input.source_path, "hash": hash});
                if let Some(t) = &input.source_tool {
                    source["source_tool"] = json!(t);
                }
                if let Some(v) = &input.verbatim {
                    source["verbatim"] = json!(v);
                }
                // An import is its importer's, private; where a team reads
                // it is kept so (no later share of the project publishes
                // it: `share` does).
                let kept_private = self.team_reads(tx, &scope).await?;
                sqlx::query(
                    "INSERT INTO memories (id, owner_id, scope, kind, content, content_hash, visibility, author_kind, agent_name, source, translation_status, created_at, kept_private) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, $9, $10, $11, $12)",
                )
                .bind(&id)
                .bind(&caller.user_id)
                .bind(&scope)
                .bind(input.kind.as_str())
                .bind(&content)
                .bind(&chash)
                .bind(Visibility::Private.as_str())
                .bind(AuthorKind::Agent.as_str())
                .bind(source.to_string())
                .bind(TranslationStatus::Skipped.as_str())
                .bind(now)
                .bind(i64::from(kept_private))
                .execute(&mut *tx)
                .await
                .db("import insert")?;
                self.check_quota(tx, &caller.user_id).await?;
                id
            }
        };
        sqlx::query("UPDATE imports SET memory_id = $1 WHERE owner_id = $2 AND source_hash = $3")
            .bind(&id)
            .bind(&caller.user_id)
            .bind(&hash)
            .execute(&mut *tx)
            .await
            .db("import ledger")?;
        Ok(ImportMemoryOutput {
            skipped: false,
            memory_id: Some(MemoryId::from_trusted(id)),
            deduplicated: deduplicated.then_some(true),
        })
    }

    /// The content of each of `ids` that names a memory of the caller's
    /// own on this server (live or invalidated): what an import of an
    /// export taken here finds already here. A teammate's memory the
    /// caller reads is not theirs: importing it makes their copy.
    pub(crate) async fn own_memory_contents(
        &self,
        caller: &Caller,
        ids: &[&str],
    ) -> Result<std::collections::HashMap<String, String>, ToolError> {
        let mut sql = Sql::new("SELECT m.id, m.content FROM memories m WHERE m.id IN ");
        sql.bind_list(ids.iter().copied())
            .push(" AND m.owner_id = ")
            .bind_str(&caller.user_id);
        let rows = sql.query().fetch_all(&self.pool).await.db("own memories")?;
        rows.iter()
            .map(|r| Ok((col::<String>(r, "id")?, col::<String>(r, "content")?)))
            .collect()
    }

    /// One page of every memory the caller can read (live and
    /// invalidated), full rows, in `created_at, seq` order: keyset-paged
    /// after the cursor's position, `limit` rows at most. Visibility and
    /// `scopes` are applied afresh on every page; the cursor is only a
    /// position.
    pub(crate) async fn export_memories(
        &self,
        caller: &Caller,
        input: ExportMemoriesInput,
    ) -> Result<ExportMemoriesOutput, ToolError> {
        let after = match &input.cursor {
            Some(c) => Some(cursor::decode(&self.thread_key, &caller.user_id, c)?),
            None => None,
        };
        let set = match &input.scopes {
            Some(s) => explicit_read_set(caller, s),
            None => ReadSet::All,
        };
        let limit = usize::try_from(input.limit).unwrap_or(usize::MAX);
        let visible = self.visible_to(caller).await?;
        // The page's keys and sizes first: the rows are read whole only for
        // the memories the page keeps (at most `limit`, and no more text
        // than the page's budget of characters past the first).
        let mut sql = Sql::new(
            "SELECT m.seq AS page_seq, m.created_at, CAST(length(m.content) + COALESCE(length(m.source), 0) AS BIGINT) AS chars FROM memories m WHERE ",
        );
        visible.push(&mut sql, "m");
        sql.push(" AND ");
        push_read_set(&mut sql, "m", &set);
        if let Some(pos) = after {
            sql.push(" AND (m.created_at > ")
                .bind_i64(pos.created_at)
                .push(" OR (m.created_at = ")
                .bind_i64(pos.created_at)
                .push(" AND m.seq > ")
                .bind_i64(pos.seq)
                .push("))");
        }
        // One row past the page says whether another page follows.
        sql.push(" ORDER BY m.created_at, m.seq LIMIT ")
            .bind_i64(i64::from(input.limit) + 1);
        // Both reads in one snapshot: the rows read second are the ones
        // the keys chose, as visible as they were, none gone between.
        let mut snapshot = self.read_snapshot().await.db("export")?;
        let keys = sql.query().fetch_all(&mut *snapshot).await.db("export")?;
        let page = page_of_keys(&keys, limit, self.limits().export_page_chars)?;
        let more = keys.len() > page.len();
        let next_cursor = match page.last() {
            Some(&(created_at, seq)) if more => {
                let pos = ExportPosition { created_at, seq };
                Some(cursor::encode(&self.thread_key, &caller.user_id, pos))
            }
            _ => None,
        };
        // The rows of the page, by their keys (the visibility was decided
        // above, by the keys' read in this snapshot; on PostgreSQL the
        // caller's member scopes it lists were read just before it, as
        // every read's are).
        let rows = if page.is_empty() {
            Vec::new()
        } else {
            let mut sql = Sql::new(&format!(
                "SELECT {} FROM memories m WHERE m.seq IN ",
                crate::search::MEMORY_COLUMNS
            ));
            for (i, &(_, seq)) in page.iter().enumerate() {
                sql.push(if i == 0 { "(" } else { ", " }).bind_i64(seq);
            }
            sql.push(") ORDER BY m.created_at, m.seq");
            sql.query().fetch_all(&mut *snapshot).await.db("export")?
        };
        snapshot.commit().await.db("export")?;
        let items = self.memories_served_to(caller, &rows).await?;
        Ok(ExportMemoriesOutput {
            count: u32::try_from(items.len()).unwrap_or(u32::MAX),
            items,
            next_cursor,
        })
    }

    /// Erase the caller and everything they own; sever what others hold
    /// that points at it. Other users' rows are untouched, and an entity
    /// the caller named first that others' memories name too is handed to
    /// one of them instead of erased.
    pub(crate) async fn delete_account(
        &self,
        cx: &mut Cx<'_>,
        _input: DeleteAccountInput,
    ) -> Result<DeleteAccountOutput, ToolError> {
        let caller = cx.caller;
        let uid = &caller.user_id;
        let tx = cx.tx().await?;
        self.check_not_last_admin(tx, uid).await?;
        // Projects the caller shared with a team stop being shared; what
        // teammates shared there becomes private to them.
        let made_private = self.release_teams_for_erasure(tx, caller).await?;
        let memories: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM memories WHERE owner_id = $1")
            .bind(uid)
            .fetch_one(&mut *tx)
            .await
            .db("count memories")?;
        // An entity of a shared scope belongs to whoever named it first,
        // and teammates' memories anchor to it: one that another user's
        // memory still names goes to that memory's owner (the earliest),
        // so the caller's erasure takes nothing from their memories.
        sqlx::query(
            "UPDATE entities SET owner_id = (SELECT m.owner_id FROM memory_entities me JOIN memories m ON m.id = me.memory_id \
                 WHERE me.entity_id = entities.id AND m.owner_id <> $1 ORDER BY m.created_at, m.id LIMIT 1) \
             WHERE owner_id = $1 AND EXISTS (SELECT 1 FROM memory_entities me JOIN memories m ON m.id = me.memory_id \
                 WHERE me.entity_id = entities.id AND m.owner_id <> $1)",
        )
        .bind(uid)
        .execute(&mut *tx)
        .await
        .db("hand over named entities")?;
        let entities: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM entities WHERE owner_id = $1")
            .bind(uid)
            .fetch_one(&mut *tx)
            .await
            .db("count entities")?;
        // Others' memories superseded by one of the caller's keep their state
        // but lose the pointer.
        sqlx::query("UPDATE memories SET superseded_by = NULL WHERE owner_id <> $1 AND superseded_by IN (SELECT id FROM memories WHERE owner_id = $1)")
            .bind(uid)
            .execute(&mut *tx)
            .await
            .db("sever supersedes")?;
        // Rows that reference the caller's memories or entities cascade with them.
        for sql in [
            "DELETE FROM conflicts WHERE owner_id = $1",
            "DELETE FROM memory_links WHERE owner_id = $1",
            "DELETE FROM rules WHERE owner_id = $1",
            "DELETE FROM imports WHERE owner_id = $1",
            "DELETE FROM edges WHERE owner_id = $1",
            "DELETE FROM memories WHERE owner_id = $1",
            "DELETE FROM entities WHERE owner_id = $1",
            "DELETE FROM project_bindings WHERE owner_id = $1",
            "DELETE FROM access_tokens WHERE user_id = $1",
            "DELETE FROM scope_members WHERE user_id = $1",
            "DELETE FROM recall_activity WHERE user_id = $1",
        ] {
            sqlx::query(sql)
                .bind(uid)
                .execute(&mut *tx)
                .await
                .db("erase")?;
        }
        // Scopes the caller created stay if others still live in them.
        sqlx::query("DELETE FROM scopes WHERE owner_id = $1 AND path NOT IN (SELECT scope FROM scope_members) AND path NOT IN (SELECT scope FROM memories)")
            .bind(uid)
            .execute(&mut *tx)
            .await
            .db("erase scopes")?;
        // A project others still belong to goes to its highest-ranked
        // member (the earliest among equals), who becomes its admin: it
        // never stays without one.
        let kept: Vec<String> = sqlx::query_scalar(
            "SELECT path FROM scopes WHERE owner_id = $1 AND path IN (SELECT scope FROM scope_members) ORDER BY path",
        )
        .bind(uid)
        .fetch_all(&mut *tx)
        .await
        .db("scopes to hand over")?;
        for path in &kept {
            let heir: String = sqlx::query_scalar(
                "SELECT user_id FROM scope_members WHERE scope = $1 \
                 ORDER BY CASE role WHEN 'admin' THEN 0 WHEN 'writer' THEN 1 ELSE 2 END, created_at, user_id LIMIT 1",
            )
            .bind(path)
            .fetch_one(&mut *tx)
            .await
            .db("scope heir")?;
            for (what, sql) in [
                (
                    "hand over scope",
                    "UPDATE scopes SET owner_id = $1 WHERE path = $2",
                ),
                (
                    "heir administers",
                    "UPDATE scope_members SET role = 'admin' WHERE user_id = $1 AND scope = $2",
                ),
            ] {
                sqlx::query(sql)
                    .bind(&heir)
                    .bind(path)
                    .execute(&mut *tx)
                    .await
                    .db(what)?;
            }
        }
        let orphan: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM scopes WHERE owner_id = $1")
            .bind(uid)
            .fetch_one(&mut *tx)
            .await
            .db("orphan scopes")?;
        if orphan > 0 {
            // Memories of others remain in a scope nobody is a member of:
            // drop the scope row; the memories stay readable by their owners.
            sqlx::query("DELETE FROM scopes WHERE owner_id = $1")
                .bind(uid)
                .execute(&mut *tx)
                .await
                .db("drop scopes")?;
        }
        let deleted = sqlx::query("DELETE FROM users WHERE id = $1")
            .bind(uid)
            .execute(&mut *tx)
            .await
            .db("erase user")?;
        for id in &made_private {
            cx.placement_changed(id);
        }
        Ok(DeleteAccountOutput {
            subject: UserId::from_trusted(uid.clone()),
            auth_deleted: deleted.rows_affected() == 1,
            memories: u64::try_from(memories).unwrap_or(0),
            entities: u64::try_from(entities).unwrap_or(0),
        })
    }
}

/// The keys an export page keeps, as (`created_at`, `seq`), from key rows
/// (`created_at`, `page_seq`, `chars`) in the export's order: at most
/// `limit`, and none past the one that brings the page's text over
/// `budget` characters (a first memory larger than the budget is a page
/// of its own). One rule for an account's export and a team's.
pub(crate) fn page_of_keys(
    keys: &[sqlx::any::AnyRow],
    limit: usize,
    budget: u64,
) -> Result<Vec<(i64, i64)>, ToolError> {
    let mut page = Vec::new();
    let mut chars = 0_u64;
    for k in keys {
        if page.len() == limit || (!page.is_empty() && chars > budget) {
            break;
        }
        let size: i64 = col(k, "chars")?;
        chars += u64::try_from(size).unwrap_or(0);
        page.push((col(k, "created_at")?, col(k, "page_seq")?));
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use zm_contracts::ToolName;

    use crate::testing::stores;
    use crate::{Caller, Store, ToolService};

    async fn call(store: &Store, caller: &Caller, tool: &str, args: &Value) -> Value {
        ToolService::new(store.clone())
            .call(caller, ToolName::parse(tool).unwrap(), args)
            .await
            .unwrap_or_else(|e| panic!("{tool} {args}: {e}"))
            .to_json()
    }

    /// An item imported before is skipped before its hint is resolved: a
    /// re-run naming a new project creates no project and binds no hint.
    #[tokio::test]
    async fn a_skipped_import_creates_no_project() {
        for (label, _dir, store) in stores().await {
            let caller = crate::testing::test_caller(&store, "skipproj").await;
            let item = |target: &str| {
                let mut v = json!({"content": "The nightly export runs at three.", "kind": "fact", "target": target, "source_path": "notes.md", "source_hash": "h-skip"});
                if target == "project" {
                    v["project_hint"] = json!("brand-new-project");
                }
                v
            };
            call(&store, &caller, "import_memory", &item("personal")).await;
            let out = call(&store, &caller, "import_memory", &item("project")).await;
            assert_eq!(out["skipped"], json!(true), "[{label}] {out}");
            let made: i64 = sqlx::query_scalar(
                "SELECT (SELECT COUNT(*) FROM project_bindings WHERE owner_id = $1) + \
                        (SELECT COUNT(*) FROM scopes WHERE owner_id = $1 AND path LIKE 'proj.%')",
            )
            .bind(&caller.user_id)
            .fetch_one(&store.pool)
            .await
            .unwrap();
            assert_eq!(
                made, 0,
                "[{label}] a skipped import made a project or a binding"
            );
        }
    }

    /// Memories written in the same millisecond are ordered by `seq`, and a
    /// page boundary inside such a run loses and repeats nothing: the
    /// keyset is the pair, not `created_at` alone.
    #[tokio::test]
    async fn pages_split_runs_of_equal_creation_instants_by_seq() {
        for (label, _dir, store) in stores().await {
            let email = format!(
                "ties-{}@example.com",
                crate::identity::random_secret(10).to_lowercase()
            );
            let user = store
                .create_user(&email, "a long test password")
                .await
                .unwrap();
            let caller = Caller::new(user.id.clone());
            for i in 0..7 {
                call(
                    &store,
                    &caller,
                    "remember",
                    &json!({"content": format!("Tie fact {i}."), "scope": "personal"}),
                )
                .await;
            }
            // Two instants: the first three memories at one, the rest at an
            // earlier one (so `seq` alone is not the order either).
            let seqs: Vec<i64> =
                sqlx::query_scalar("SELECT seq FROM memories WHERE owner_id = $1 ORDER BY seq")
                    .bind(&user.id)
                    .fetch_all(&store.pool)
                    .await
                    .unwrap();
            sqlx::query("UPDATE memories SET created_at = CASE WHEN seq <= $1 THEN 2000000000000 ELSE 1900000000000 END WHERE owner_id = $2")
                .bind(seqs[2])
                .bind(&user.id)
                .execute(&store.pool)
                .await
                .unwrap();
            let expected: Vec<String> = sqlx::query_scalar(
                "SELECT id FROM memories WHERE owner_id = $1 ORDER BY created_at, seq",
            )
            .bind(&user.id)
            .fetch_all(&store.pool)
            .await
            .unwrap();
            for limit in 1..=7 {
                let mut ids = Vec::new();
                let mut args = json!({"limit": limit});
                for _ in 0..=expected.len() {
                    let page = call(&store, &caller, "export_memories", &args).await;
                    ids.extend(
                        page["items"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|m| m["id"].as_str().unwrap().to_string()),
                    );
                    match page.get("next_cursor") {
                        Some(c) => args["cursor"] = c.clone(),
                        None => break,
                    }
                }
                // (A cursor that never ends stops after as many pages as
                // memories and fails here.)
                assert_eq!(ids, expected, "[{label}] limit {limit}");
            }
        }
    }
}
