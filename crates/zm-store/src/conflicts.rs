//! Conflicts: `challenge`, `list_conflicts`, `get_conflict`, `resolve_conflict`.

use sqlx::Row;
use sqlx::any::AnyRow;
use zm_contracts::{
    ChallengeInput, ChallengeOutput, Conflict, ConflictSide, ConflictStatus, ConflictVerdict,
    GetConflictInput, GetConflictOutput, IdKind, ListConflictsInput, ListConflictsOutput, MemoryId,
    MemoryKind, ResolveConflictInput, ResolveConflictOutput, ToolError,
    validate::{FieldError, validation_error},
};

use crate::clock::rfc3339;
use crate::db::DbResult;
use crate::guard;
use crate::service::Cx;
use crate::sql::Sql;
use crate::store::{Caller, Store};

const NOT_YOURS: &str = "Conflict not found or not yours.";

/// The conflict columns with both sides (aliases c, a, b).
const CONFLICT_SELECT: &str = "SELECT c.id, c.status, c.verdict, c.confidence, c.rationale, c.created_at, \
    a.id AS a_id, a.kind AS a_kind, a.scope AS a_scope, a.created_at AS a_created, a.content AS a_content, \
    b.id AS b_id, b.kind AS b_kind, b.scope AS b_scope, b.created_at AS b_created, b.content AS b_content \
    FROM conflicts c JOIN memories a ON a.id = c.memory_a LEFT JOIN memories b ON b.id = c.memory_b";

/// Rows whose memories are all the caller's.
fn push_owned(sql: &mut Sql, user_id: &str) {
    sql.push(" a.owner_id = ").bind_str(user_id);
    sql.push(" AND (c.memory_b IS NULL OR b.owner_id = ")
        .bind_str(user_id)
        .push(")");
}

fn side(r: &AnyRow, p: &str) -> Option<ConflictSide> {
    let id: Option<String> = r.get(format!("{p}_id").as_str());
    Some(ConflictSide {
        id: MemoryId::from_trusted(id?),
        kind: MemoryKind::parse(&r.get::<String, _>(format!("{p}_kind").as_str()))
            .unwrap_or_default(),
        scope: r.get(format!("{p}_scope").as_str()),
        created_at: rfc3339(r.get(format!("{p}_created").as_str())),
        content: r.get(format!("{p}_content").as_str()),
    })
}

fn conflict_from_row(r: &AnyRow) -> Conflict {
    Conflict {
        dispute_id: r.get("id"),
        status: ConflictStatus::parse(&r.get::<String, _>("status"))
            .unwrap_or(ConflictStatus::Pending),
        verdict: ConflictVerdict::parse(&r.get::<String, _>("verdict"))
            .unwrap_or(ConflictVerdict::Unjudged),
        confidence: r.get("confidence"),
        rationale: r.get("rationale"),
        created_at: rfc3339(r.get("created_at")),
        memory_a: side(r, "a").expect("memory_a is NOT NULL"),
        memory_b: side(r, "b"),
    }
}

fn field_error(path: &str, reason: &str) -> ToolError {
    validation_error(vec![FieldError {
        path: path.into(),
        reason: reason.into(),
    }])
}

impl Store {
    /// Dispute one of the caller's memories.
    pub(crate) async fn challenge(
        &self,
        cx: &mut Cx<'_>,
        input: ChallengeInput,
    ) -> Result<ChallengeOutput, ToolError> {
        let caller = cx.caller;
        let mut rationale = input.reason.trim().to_string();
        if let Some(e) = input
            .evidence
            .as_deref()
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            rationale.push_str("\n\nEvidence: ");
            rationale.push_str(e);
        }
        if let Some(hit) = guard::check_fields([("content".to_string(), rationale.as_str())]) {
            return Err(guard::rejection(&hit));
        }
        let id = input.memory_id.as_str();
        let tx = cx.tx().await?;
        let row =
            sqlx::query("SELECT invalidated_at FROM memories WHERE id = $1 AND owner_id = $2")
                .bind(id)
                .bind(&caller.user_id)
                .fetch_optional(&mut *tx)
                .await
                .db("challenge load")?;
        let Some(row) = row else {
            return Err(ToolError::not_found(format!("Memory {id} not found.")));
        };
        if row.get::<Option<i64>, _>("invalidated_at").is_some() {
            return Err(ToolError::conflict(format!(
                "Memory {id} is invalidated; there is nothing to challenge."
            )));
        }
        let pending: Option<String> = sqlx::query_scalar("SELECT id FROM conflicts WHERE memory_a = $1 AND status = 'pending' AND verdict = 'challenged'")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .db("challenge pending")?;
        if let Some(dispute_id) = pending {
            return Ok(ChallengeOutput {
                dispute_id,
                already_pending: true,
            });
        }
        let dispute_id = IdKind::MemoryReview.generate();
        sqlx::query("INSERT INTO conflicts (id, owner_id, memory_a, memory_b, verdict, confidence, rationale, status, created_at) VALUES ($1, $2, $3, NULL, 'challenged', NULL, $4, 'pending', $5)")
            .bind(&dispute_id)
            .bind(&caller.user_id)
            .bind(id)
            .bind(&rationale)
            .bind(self.now())
            .execute(&mut *tx)
            .await
            .db("challenge insert")?;
        Ok(ChallengeOutput {
            dispute_id,
            already_pending: false,
        })
    }

    /// The caller's conflicts, newest first.
    pub(crate) async fn list_conflicts(
        &self,
        caller: &Caller,
        input: ListConflictsInput,
    ) -> Result<ListConflictsOutput, ToolError> {
        let mut sql = Sql::new(CONFLICT_SELECT);
        sql.push(" WHERE");
        push_owned(&mut sql, &caller.user_id);
        sql.push(" AND c.status = ").bind_str(input.status.as_str());
        if let Some(v) = input.verdict {
            sql.push(" AND c.verdict = ").bind_str(v.as_str());
        }
        sql.push(" ORDER BY c.created_at DESC, c.id DESC LIMIT ")
            .bind_i64(input.limit.clamp(1, 100) as i64);
        let rows = sql
            .query()
            .fetch_all(&self.pool)
            .await
            .db("list conflicts")?;
        Ok(ListConflictsOutput {
            conflicts: rows.iter().map(conflict_from_row).collect(),
        })
    }

    async fn load_conflict(
        &self,
        caller: &Caller,
        dispute_id: &str,
    ) -> Result<Conflict, ToolError> {
        let mut sql = Sql::new(CONFLICT_SELECT);
        sql.push(" WHERE c.id = ")
            .bind_str(dispute_id.trim().to_ascii_lowercase())
            .push(" AND");
        push_owned(&mut sql, &caller.user_id);
        let row = sql
            .query()
            .fetch_optional(&self.pool)
            .await
            .db("get conflict")?;
        row.as_ref()
            .map(conflict_from_row)
            .ok_or_else(|| ToolError::not_found(NOT_YOURS))
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
        enum Action {
            Retire,
            KeepBoth,
            Winner(String),
        }
        let action = if input.retire == Some(true) {
            Action::Retire
        } else if input.keep_both == Some(true) {
            Action::KeepBoth
        } else if let Some(w) = &input.winner {
            Action::Winner(w.as_str().to_string())
        } else {
            return Err(field_error(
                "",
                "pass one of winner, keep_both: true or retire: true",
            ));
        };
        let a = c.memory_a.id.as_str().to_string();
        let b = c.memory_b.as_ref().map(|s| s.id.as_str().to_string());
        // (status, resolution, winner, memory to retire, superseded by)
        let plan: (&str, &str, Option<String>, Option<String>, Option<String>) = match (&action, &b)
        {
            (Action::Retire, Some(_)) => {
                return Err(field_error(
                    "retire",
                    "retire applies to a challenged memory, not to a pair; pick a winner or keep_both",
                ));
            }
            (Action::Retire, None) => ("resolved", "retired", None, Some(a.clone()), None),
            (Action::KeepBoth, Some(_)) => ("dismissed", "keep_both", None, None, None),
            (Action::KeepBoth, None) => ("dismissed", "upheld", None, None, None),
            (Action::Winner(w), None) if *w == a => {
                ("dismissed", "upheld", Some(w.clone()), None, None)
            }
            (Action::Winner(_), None) => {
                return Err(field_error(
                    "winner",
                    "the winner of a challenge must be the challenged memory",
                ));
            }
            (Action::Winner(w), Some(bid)) if w == &a || w == bid => {
                let loser = if w == &a { bid.clone() } else { a.clone() };
                (
                    "resolved",
                    "supersedes",
                    Some(w.clone()),
                    Some(loser),
                    Some(w.clone()),
                )
            }
            (Action::Winner(_), Some(_)) => {
                return Err(field_error(
                    "winner",
                    "the winner must be one of the conflict's two memories",
                ));
            }
        };
        let (status, resolution, winner, retire, successor) = plan;
        let now = self.now();
        let tx = cx.tx().await?;
        let done = sqlx::query("UPDATE conflicts SET status = $1, resolution = $2, winner = $3, resolved_by = $4, resolved_at = $5 WHERE id = $6 AND status = 'pending'")
            .bind(status)
            .bind(resolution)
            .bind(winner)
            .bind(&caller.user_id)
            .bind(now)
            .bind(&c.dispute_id)
            .execute(&mut *tx)
            .await
            .db("resolve conflict")?;
        if done.rows_affected() == 0 {
            return Err(ToolError::conflict(format!(
                "Conflict {} is not pending.",
                c.dispute_id
            )));
        }
        if let Some(loser) = retire {
            sqlx::query("UPDATE memories SET invalidated_at = $1, invalidated_by = $2, invalidated_by_agent = $3, superseded_by = $4 WHERE id = $5 AND invalidated_at IS NULL")
                .bind(now)
                .bind(&caller.user_id)
                .bind(caller.agent_name.clone())
                .bind(successor.clone())
                .bind(&loser)
                .execute(&mut *tx)
                .await
                .db("retire loser")?;
            if let Some(w) = successor {
                sqlx::query("INSERT INTO memory_links (src, dst, type, owner_id, created_at) VALUES ($1, $2, 'supersedes', $3, $4) ON CONFLICT (src, dst, type) DO NOTHING")
                    .bind(&w)
                    .bind(&loser)
                    .bind(&caller.user_id)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .db("supersede link")?;
            }
        }
        Ok(ResolveConflictOutput { resolved: true })
    }
}
