//! Conflicts: `challenge`, `list_conflicts`, `get_conflict`, `resolve_conflict`.

use sqlx::any::AnyRow;
use zm_contracts::{
    ChallengeInput, ChallengeOutput, Conflict, ConflictResolution, ConflictSide, ConflictStatus,
    ConflictVerdict, GetConflictInput, GetConflictOutput, IdKind, ListConflictsInput,
    ListConflictsOutput, MemoryId, MemoryLinkType, ResolveConflictInput, ResolveConflictOutput,
    ToolError, validate::field_error,
};

use crate::clock::rfc3339;
use crate::cursor;
use crate::db::DbResult;
use crate::guard;
use crate::rows::{FromAnyRow, col, corrupt_row, enum_col, opt_id_col};
use crate::service::Cx;
use crate::sql::Sql;
use crate::store::{Caller, Store};

const NOT_YOURS: &str = "Conflict not found or not yours.";

/// The conflict columns with both sides (aliases c, a, b).
const CONFLICT_COLUMNS: &str = "c.id, c.status, c.verdict, c.confidence, c.rationale, c.created_at, \
    a.id AS a_id, a.kind AS a_kind, a.scope AS a_scope, a.created_at AS a_created, a.content AS a_content, \
    b.id AS b_id, b.kind AS b_kind, b.scope AS b_scope, b.created_at AS b_created, b.content AS b_content";

/// `SELECT columns` of the conflicts whose memories are all the caller's
/// (aliases c, a, b), ending in a condition: add more with `AND`. The one
/// place that decides which conflicts a user may see. A conflict belongs
/// to its first memory's owner (filed by them, handed over with it), so
/// `c.owner_id` names the same user: it lets the conflicts' own index
/// (owner, status, created_at) find them without reading other users'.
pub(crate) fn owned_conflicts(columns: &str, user_id: &str) -> Sql {
    let mut sql = Sql::new(&format!(
        "SELECT {columns} FROM conflicts c JOIN memories a ON a.id = c.memory_a \
         LEFT JOIN memories b ON b.id = c.memory_b WHERE c.owner_id = "
    ));
    sql.bind_str(user_id)
        .push(" AND a.owner_id = ")
        .bind_str(user_id)
        .push(" AND (c.memory_b IS NULL OR b.owner_id = ")
        .bind_str(user_id)
        .push(")");
    sql
}

/// The condition that every memory of conflict `c` (its memories `a`
/// and `b`, aliases) is live. A pending conflict one of whose memories
/// was retired since (forgotten, closed, superseded: the way
/// `similar_existing`'s hint settles a restatement) is moot: not listed as
/// pending, it marks no recall hit disputed, and it does not count toward
/// the near-duplicate sweep's cap. Restoring the memory brings it back.
fn both_live(c: &str, a: &str, b: &str) -> String {
    format!("{a}.invalidated_at IS NULL AND ({c}.memory_b IS NULL OR {b}.invalidated_at IS NULL)")
}

/// [`both_live`] on [`owned_conflicts`]' aliases: add it to one.
pub(crate) fn owned_and_live() -> String {
    format!(" AND {}", both_live("c", "a", "b"))
}

/// A column of [`owned_conflicts`]' rows: the conflict's status as a
/// reader should take it, `moot` for a pending one that is not
/// [`both_live`].
pub(crate) fn shown_status() -> String {
    format!(
        "CASE WHEN c.status = 'pending' AND NOT ({}) THEN 'moot' ELSE c.status END",
        both_live("c", "a", "b")
    )
}

/// An owner with this many pending conflicts gets no more `unjudged` ones
/// (from `remember`'s word overlap or the sweep by meaning) until some are
/// settled: a review queue nobody can work through is noise.
pub(crate) const UNJUDGED_PENDING_CAP: i64 = 100;

/// File memories `a` and `b` for review as an `unjudged` pair (`a`'s
/// owner's), unless SQL finds a reason not to: both live, one owner, one
/// scope, not the same words (of two kinds, a task beside a fact: nothing
/// to judge), no conflict of the pair yet (of any status: a dismissed
/// pair stays dismissed; one pending conflict a pair), no link between
/// them (a `contradicts` link files its own), and the owner under
/// [`UNJUDGED_PENDING_CAP`] pending. One rule for `remember`'s
/// near-duplicates by words and the sweep's by meaning. Whether one was
/// filed.
pub(crate) async fn file_unjudged(
    conn: &mut sqlx::AnyConnection,
    (a, b): (&str, &str),
    rationale: Option<&str>,
    now: i64,
) -> Result<bool, ToolError> {
    let sql = format!(
        "INSERT INTO conflicts (id, owner_id, memory_a, memory_b, verdict, confidence, rationale, status, created_at) \
         SELECT $1, a.owner_id, a.id, b.id, 'unjudged', NULL, $4, 'pending', $5 \
         FROM memories a JOIN memories b ON b.id = $3 \
         WHERE a.id = $2 AND b.owner_id = a.owner_id AND b.scope = a.scope \
         AND a.content_hash <> b.content_hash \
         AND a.invalidated_at IS NULL AND b.invalidated_at IS NULL \
         AND NOT EXISTS (SELECT 1 FROM conflicts c WHERE c.owner_id = a.owner_id AND \
             ((c.memory_a = a.id AND c.memory_b = b.id) OR (c.memory_a = b.id AND c.memory_b = a.id))) \
         AND NOT EXISTS (SELECT 1 FROM memory_links l WHERE \
             (l.src = a.id AND l.dst = b.id) OR (l.src = b.id AND l.dst = a.id)) \
         AND {} < $6",
        live_pending_of("a.owner_id")
    );
    let done = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(IdKind::MemoryReview.generate())
        .bind(a)
        .bind(b)
        .bind(rationale.map(str::to_string))
        .bind(now)
        .bind(UNJUDGED_PENDING_CAP)
        .execute(&mut *conn)
        .await
        .db("unjudged conflict")?;
    Ok(done.rows_affected() > 0)
}

/// SQL counting the live pending conflicts of the owner `owner` names (a
/// column or a parameter): what [`UNJUDGED_PENDING_CAP`] caps.
pub(crate) fn live_pending_of(owner: &str) -> String {
    format!(
        "(SELECT COUNT(*) FROM conflicts p JOIN memories pa ON pa.id = p.memory_a \
         LEFT JOIN memories pb ON pb.id = p.memory_b WHERE p.owner_id = {owner} AND p.status = 'pending' AND {})",
        both_live("p", "pa", "pb")
    )
}

/// The pending challenge of memory `id`, if it has one.
async fn pending_challenge(
    tx: &mut sqlx::AnyConnection,
    id: &str,
) -> Result<Option<String>, ToolError> {
    sqlx::query_scalar(
        "SELECT id FROM conflicts WHERE memory_a = $1 AND status = $2 AND verdict = $3",
    )
    .bind(id)
    .bind(ConflictStatus::Pending.as_str())
    .bind(ConflictVerdict::Challenged.as_str())
    .fetch_optional(&mut *tx)
    .await
    .db("challenge pending")
}

/// One side of a conflict (columns prefixed `a_` / `b_`); `None` when the
/// row has no such memory.
fn side(r: &AnyRow, p: &str) -> Result<Option<ConflictSide>, ToolError> {
    let Some(id) = opt_id_col::<MemoryId>(r, &format!("{p}_id"))? else {
        return Ok(None);
    };
    Ok(Some(ConflictSide {
        id,
        kind: enum_col(r, &format!("{p}_kind"))?,
        scope: col(r, &format!("{p}_scope"))?,
        created_at: rfc3339(col(r, &format!("{p}_created"))?),
        content: col(r, &format!("{p}_content"))?,
    }))
}

/// A conflict row ([`CONFLICT_COLUMNS`]).
impl FromAnyRow for Conflict {
    fn from_row(r: &AnyRow) -> Result<Conflict, ToolError> {
        // The join is inner: a conflict without its first memory is corrupt.
        let memory_a =
            side(r, "a")?.ok_or_else(|| corrupt_row(r, "a conflict without memory_a"))?;
        Ok(Conflict {
            dispute_id: col(r, "id")?,
            status: enum_col(r, "status")?,
            verdict: enum_col(r, "verdict")?,
            confidence: col(r, "confidence")?,
            rationale: col(r, "rationale")?,
            created_at: rfc3339(col(r, "created_at")?),
            memory_a,
            memory_b: side(r, "b")?,
        })
    }
}

/// How a conflict is settled: its new status and resolution, the winner
/// recorded, the memory retired and what supersedes it.
struct Settlement {
    status: ConflictStatus,
    resolution: ConflictResolution,
    winner: Option<MemoryId>,
    retire: Option<MemoryId>,
    successor: Option<MemoryId>,
}

impl Settlement {
    fn new(status: ConflictStatus, resolution: ConflictResolution) -> Settlement {
        Settlement {
            status,
            resolution,
            winner: None,
            retire: None,
            successor: None,
        }
    }
}

impl Store {
    /// Dispute one of the caller's memories.
    pub(crate) async fn challenge(
        &self,
        cx: &mut Cx<'_>,
        input: ChallengeInput,
    ) -> Result<ChallengeOutput, ToolError> {
        let caller = cx.caller;
        let reason = input.reason.trim();
        let evidence = input
            .evidence
            .as_deref()
            .map(str::trim)
            .filter(|e| !e.is_empty());
        // Each input under its own name: the refusal names the field the
        // caller sent the secret in.
        let fields = std::iter::once(("reason".to_string(), reason))
            .chain(evidence.map(|e| ("evidence".to_string(), e)));
        if let Some(hit) = guard::check_fields(fields) {
            return Err(guard::rejection(&hit));
        }
        let mut rationale = reason.to_string();
        if let Some(e) = evidence {
            rationale.push_str("\n\nEvidence: ");
            rationale.push_str(e);
        }
        let id = input.memory_id.as_str();
        let tx = cx.tx().await?;
        let scope: Option<String> =
            sqlx::query_scalar("SELECT scope FROM memories WHERE id = $1 AND owner_id = $2")
                .bind(id)
                .bind(&caller.user_id)
                .fetch_optional(&mut *tx)
                .await
                .db("challenge load")?;
        let Some(scope) = scope else {
            return Err(ToolError::not_found(format!("Memory {id} not found.")));
        };
        // On PostgreSQL a team removal may be handing the memory over right
        // now: its teams, then its row, are held and it is read again, so
        // the challenge either lands first (and the hand-over dismisses it
        // as the giver's) or finds the memory no longer the caller's. A
        // challenge committed after the hand-over would stay pending on a
        // memory its owner no longer holds, blocking the heir's for good.
        self.hold_teams_of(&mut *tx, &[&scope]).await?;
        match self.hold_own_memory(tx, caller, id).await? {
            None => return Err(ToolError::not_found(format!("Memory {id} not found."))),
            Some(Some(_)) => {
                return Err(ToolError::conflict(format!(
                    "Memory {id} is invalidated; there is nothing to challenge."
                )));
            }
            Some(None) => {}
        }
        if let Some(dispute_id) = pending_challenge(tx, id).await? {
            return Ok(ChallengeOutput {
                dispute_id,
                already_pending: true,
            });
        }
        let dispute_id = IdKind::MemoryReview.generate();
        // Two challenges at once (PostgreSQL): the one pending challenge a
        // memory may have (a unique index) is the first's; the second
        // finds it.
        let inserted = sqlx::query("INSERT INTO conflicts (id, owner_id, memory_a, memory_b, verdict, confidence, rationale, status, created_at) VALUES ($1, $2, $3, NULL, $4, NULL, $5, $6, $7) \
             ON CONFLICT (memory_a) WHERE status = 'pending' AND verdict = 'challenged' DO NOTHING")
            .bind(&dispute_id)
            .bind(&caller.user_id)
            .bind(id)
            .bind(ConflictVerdict::Challenged.as_str())
            .bind(&rationale)
            .bind(ConflictStatus::Pending.as_str())
            .bind(self.now())
            .execute(&mut *tx)
            .await
            .db("challenge insert")?;
        if inserted.rows_affected() == 0 {
            // Settled between the insert and this read: say so.
            let Some(dispute_id) = pending_challenge(tx, id).await? else {
                return Err(ToolError::conflict(format!(
                    "A challenge of memory {id} was settled just now; challenge it again if it still stands."
                )));
            };
            return Ok(ChallengeOutput {
                dispute_id,
                already_pending: true,
            });
        }
        Ok(ChallengeOutput {
            dispute_id,
            already_pending: false,
        })
    }

    /// The caller's conflicts, newest first: keyset-paged after the
    /// cursor's position, `limit` at most. The filters are applied afresh on
    /// every page; the cursor is only a position.
    pub(crate) async fn list_conflicts(
        &self,
        caller: &Caller,
        input: ListConflictsInput,
    ) -> Result<ListConflictsOutput, ToolError> {
        let after = match &input.cursor {
            Some(c) => Some(cursor::decode_conflicts(
                &self.thread_key,
                &caller.user_id,
                c,
            )?),
            None => None,
        };
        let limit = input.limit.clamp(1, 100);
        let mut sql = owned_conflicts(CONFLICT_COLUMNS, &caller.user_id);
        sql.push(" AND c.status = ").bind_str(input.status.as_str());
        if input.status == ConflictStatus::Pending {
            sql.push(&owned_and_live());
        }
        if let Some(v) = input.verdict {
            sql.push(" AND c.verdict = ").bind_str(v.as_str());
        }
        if let Some(pos) = &after {
            sql.push(" AND (c.created_at < ")
                .bind_i64(pos.created_at)
                .push(" OR (c.created_at = ")
                .bind_i64(pos.created_at)
                .push(" AND c.id < ")
                .bind_str(&pos.id)
                .push("))");
        }
        // One row past the page says whether another page follows.
        sql.push(" ORDER BY c.created_at DESC, c.id DESC LIMIT ")
            .bind_i64(i64::from(limit) + 1);
        let mut rows = sql
            .query()
            .fetch_all(&self.pool)
            .await
            .db("list conflicts")?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = match rows.last() {
            Some(last) if more => {
                let pos = cursor::ConflictPosition {
                    created_at: col(last, "created_at")?,
                    id: col(last, "id")?,
                };
                Some(cursor::encode_conflicts(
                    &self.thread_key,
                    &caller.user_id,
                    &pos,
                ))
            }
            _ => None,
        };
        Ok(ListConflictsOutput {
            conflicts: Conflict::from_rows(&rows)?,
            next_cursor,
        })
    }

    async fn load_conflict(
        &self,
        caller: &Caller,
        dispute_id: &str,
    ) -> Result<Conflict, ToolError> {
        let mut sql = owned_conflicts(CONFLICT_COLUMNS, &caller.user_id);
        sql.push(" AND c.id = ")
            .bind_str(dispute_id.trim().to_ascii_lowercase());
        let row = sql
            .query()
            .fetch_optional(&self.pool)
            .await
            .db("get conflict")?;
        match row {
            Some(r) => Conflict::from_row(&r),
            None => Err(ToolError::not_found(NOT_YOURS)),
        }
    }

    /// One conflict, if all its memories are the caller's.
    pub(crate) async fn get_conflict(
        &self,
        caller: &Caller,
        input: GetConflictInput,
    ) -> Result<GetConflictOutput, ToolError> {
        Ok(GetConflictOutput {
            conflict: self.load_conflict(caller, &input.dispute_id).await?,
        })
    }

    /// Settle a pending conflict. A conflict that is not entirely the
    /// caller's reads as not found, exactly like one that never existed.
    pub(crate) async fn resolve_conflict(
        &self,
        cx: &mut Cx<'_>,
        input: ResolveConflictInput,
    ) -> Result<ResolveConflictOutput, ToolError> {
        let caller = cx.caller;
        let c = self.load_conflict(caller, &input.dispute_id).await?;
        // Settled already: said first, before what the chosen action
        // would check (a retry naming the memory the resolution retired
        // was told to restore it, and then that the conflict was settled,
        // its retirement undone for nothing). The update below still
        // checks, for a resolution that wins meanwhile.
        if c.status != ConflictStatus::Pending {
            return Err(ToolError::conflict(format!(
                "Conflict {} is not pending: it was {} already.",
                c.dispute_id,
                c.status.as_str()
            )));
        }
        enum Action {
            Retire,
            KeepBoth,
            Winner(MemoryId),
        }
        let action = if input.retire == Some(true) {
            Action::Retire
        } else if input.keep_both == Some(true) {
            Action::KeepBoth
        } else if let Some(w) = input.winner {
            Action::Winner(w)
        } else {
            return Err(field_error(
                "",
                "pass one of winner, keep_both: true or retire: true",
            ));
        };
        let a = c.memory_a.id.clone();
        let b = c.memory_b.as_ref().map(|s| s.id.clone());
        let plan = match (&action, &b) {
            (Action::Retire, Some(_)) => {
                return Err(field_error(
                    "retire",
                    "retire applies to a challenged memory, not to a pair; pick a winner or keep_both",
                ));
            }
            (Action::Retire, None) => Settlement {
                retire: Some(a.clone()),
                ..Settlement::new(ConflictStatus::Resolved, ConflictResolution::Retired)
            },
            (Action::KeepBoth, Some(_)) => {
                Settlement::new(ConflictStatus::Dismissed, ConflictResolution::KeepBoth)
            }
            (Action::KeepBoth, None) => {
                Settlement::new(ConflictStatus::Dismissed, ConflictResolution::Upheld)
            }
            (Action::Winner(w), None) if *w == a => Settlement {
                winner: Some(w.clone()),
                ..Settlement::new(ConflictStatus::Dismissed, ConflictResolution::Upheld)
            },
            (Action::Winner(_), None) => {
                return Err(field_error(
                    "winner",
                    "the winner of a challenge must be the challenged memory",
                ));
            }
            (Action::Winner(w), Some(bid)) if w == &a || w == bid => {
                let loser = if w == &a { bid.clone() } else { a.clone() };
                Settlement {
                    winner: Some(w.clone()),
                    retire: Some(loser),
                    successor: Some(w.clone()),
                    ..Settlement::new(ConflictStatus::Resolved, ConflictResolution::Supersedes)
                }
            }
            (Action::Winner(_), Some(_)) => {
                return Err(field_error(
                    "winner",
                    "the winner must be one of the conflict's two memories",
                ));
            }
        };
        let Settlement {
            status,
            resolution,
            winner,
            retire,
            successor,
        } = plan;
        let now = self.now();
        let tx = cx.tx().await?;
        // The memories' teams first (PostgreSQL), as every write into a
        // scope holds them before its rows: a team change handing either
        // memory over waits for this, or runs first and is seen below.
        let mut scopes = vec![c.memory_a.scope.as_str()];
        scopes.extend(c.memory_b.as_ref().map(|b| b.scope.as_str()));
        self.hold_teams_of(&mut *tx, &scopes).await?;
        // Then both memories, in id order (PostgreSQL), as a `contradicts`
        // link between them holds them: holding the winner first and
        // updating the loser after could deadlock with it.
        let mut ids = vec![c.memory_a.id.as_str()];
        ids.extend(c.memory_b.as_ref().map(|b| b.id.as_str()));
        self.hold_memories(&mut *tx, &ids, None).await?;
        // The winner that supersedes the other must still stand, and be the
        // caller's (read in the transaction, and held on PostgreSQL: a
        // forget or a hand-over may have come since the conflict's load).
        if let Some(w) = &successor {
            let live = self.hold_own_memory(tx, caller, w.as_str()).await?;
            if !matches!(live, Some(None)) {
                return Err(ToolError::conflict(format!(
                    "Memory {} is invalidated (or no longer yours); restore it before it wins, or keep both.",
                    w.as_str()
                )));
            }
            // It links the loser (`supersedes`), which everyone reading it
            // sees: what `link` takes, the writer role where it is shared.
            self.may_link_to(tx, caller, w.as_str()).await?;
        }
        let done = sqlx::query("UPDATE conflicts SET status = $1, resolution = $2, winner = $3, resolved_by = $4, resolved_at = $5 WHERE id = $6 AND status = $7 AND owner_id = $4")
            .bind(status.as_str())
            .bind(resolution.as_str())
            .bind(winner.map(MemoryId::into_string))
            .bind(&caller.user_id)
            .bind(now)
            .bind(&c.dispute_id)
            .bind(ConflictStatus::Pending.as_str())
            .execute(&mut *tx)
            .await
            .db("resolve conflict")?;
        if done.rows_affected() == 0 {
            return Err(ToolError::conflict(format!(
                "Conflict {} is not pending.",
                c.dispute_id
            )));
        }
        let mut retired = None;
        if let Some(loser) = retire {
            // Retiring a memory the members of its scope read takes the
            // writer role there, as a forget of it does.
            let placed = sqlx::query(
                "SELECT scope, visibility FROM memories WHERE id = $1 AND owner_id = $2",
            )
            .bind(loser.as_str())
            .bind(&caller.user_id)
            .fetch_optional(&mut *tx)
            .await
            .db("loser placement")?;
            if let Some(r) = placed {
                let scope: String = col(&r, "scope")?;
                self.may_change_own_in(tx, caller, &scope, enum_col(&r, "visibility")?)
                    .await?;
            }
            let gone = sqlx::query("UPDATE memories SET invalidated_at = $1, invalidated_by = $2, invalidated_by_agent = $3, superseded_by = $4 WHERE id = $5 AND invalidated_at IS NULL AND owner_id = $2")
                .bind(now)
                .bind(&caller.user_id)
                .bind(caller.agent_name.clone())
                .bind(successor.as_ref().map(|w| w.as_str().to_string()))
                .bind(loser.as_str())
                .execute(&mut *tx)
                .await
                .db("retire loser")?;
            // A rule promoted from the retired memory goes with it, as on
            // a forget. Nothing retired: already invalidated (fine: the
            // winner stands), or no longer the caller's (refused, undone).
            let retired_now = gone.rows_affected() > 0;
            if retired_now {
                self.retire_rule_of(tx, &caller.user_id, loser.as_str())
                    .await?;
            } else {
                let mine: Option<String> =
                    sqlx::query_scalar("SELECT id FROM memories WHERE id = $1 AND owner_id = $2")
                        .bind(loser.as_str())
                        .bind(&caller.user_id)
                        .fetch_optional(&mut *tx)
                        .await
                        .db("resolve loser")?;
                if mine.is_none() {
                    return Err(ToolError::conflict(format!(
                        "Memory {} is no longer yours; this conflict cannot be settled by retiring it.",
                        loser.as_str()
                    )));
                }
            }
            retired = Some(loser.clone());
            // The winner supersedes only what this retired: a loser gone
            // before (forgotten, or superseded by a third memory) keeps
            // its own story, and no link says otherwise.
            // The link is the owner's, also where a teammate drew the same
            // one before: it is the version history of the owner's memory
            // now, which a restore by the owner undoes and a teammate's
            // erasure does not take away.
            if let Some(w) = successor.filter(|_| retired_now) {
                sqlx::query("INSERT INTO memory_links (src, dst, type, owner_id, created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (src, dst, type) DO UPDATE SET owner_id = excluded.owner_id")
                    .bind(w.as_str())
                    .bind(loser.as_str())
                    .bind(MemoryLinkType::Supersedes.as_str())
                    .bind(&caller.user_id)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .db("supersede link")?;
            }
        }
        if let Some(id) = retired {
            cx.placement_changed(id.as_str());
        }
        Ok(ResolveConflictOutput { resolved: true })
    }
}
