//! Standing rules: `promote_rule`, and pin / unpin / revoke / dismiss for
//! the dashboard; delivery for instructions and `zm://rules`.

use sqlx::any::AnyRow;
use zm_contracts::scope;
use zm_contracts::validate::field_error;
use zm_contracts::{
    IdKind, MemoryId, PromoteRuleInput, PromoteRuleOutput, Rule, RuleLayer, RuleStatus, ToolError,
};

use crate::db::DbResult;
use crate::guard;
use crate::rows::{FromAnyRow, col, enum_col, flag_col, id_col, parse_stored, stored_enum};
use crate::scopes::{ReadSet, canonical_path};
use crate::service::Cx;
use crate::sql::Sql;
use crate::store::{Caller, Store};

stored_enum! {
    /// Where a rule stands (`rules.status`): delivered while `promoted`;
    /// `dismissed` and `revoked` are terminal until promoted again with
    /// `force`.
    pub RuleState {
        Promoted = "promoted",
        Dismissed = "dismissed",
        Revoked = "revoked",
    }
}

/// A rule as the owner manages it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRecord {
    pub id: String,
    pub memory_id: MemoryId,
    pub text: String,
    pub layer: RuleLayer,
    pub applies_scope: Option<String>,
    pub status: RuleState,
    pub pinned: bool,
    /// When it was (last) promoted (epoch ms).
    pub promoted_at: Option<i64>,
}

impl FromAnyRow for RuleRecord {
    fn from_row(r: &AnyRow) -> Result<RuleRecord, ToolError> {
        Ok(RuleRecord {
            id: col(r, "id")?,
            memory_id: id_col(r, "memory_id")?,
            text: col(r, "text")?,
            layer: enum_col(r, "layer")?,
            applies_scope: col(r, "applies_scope")?,
            status: enum_col(r, "status")?,
            pinned: flag_col(r, "pinned")?,
            promoted_at: col(r, "promoted_at")?,
        })
    }
}

/// The memory a rule is promoted from.
struct RuleSource {
    content: String,
    scope: String,
    invalidated_at: Option<i64>,
    /// Private, and kept so where a team reads (or may come to read) it:
    /// its text reaches nobody else without a share.
    private: bool,
    kept_private: bool,
}

impl FromAnyRow for RuleSource {
    fn from_row(r: &AnyRow) -> Result<RuleSource, ToolError> {
        Ok(RuleSource {
            content: col(r, "content")?,
            scope: col(r, "scope")?,
            invalidated_at: col(r, "invalidated_at")?,
            private: col::<String>(r, "visibility")? == zm_contracts::Visibility::Private.as_str(),
            kept_private: col::<i64>(r, "kept_private")? != 0,
        })
    }
}

/// A change the owner makes to a promoted rule.
#[derive(Clone, Copy)]
enum RuleChange<'a> {
    /// Pin (or unpin) it.
    Pin(bool),
    /// Revoke it, with the owner's reason.
    Revoke { reason: &'a str },
}

/// A rule revoked for a team by its admin: the team, the action its audit
/// log records, and, for a current member's rule, the scope it must still
/// apply to when the revocation is written.
type RevokedForTeam = (
    crate::teams::StewardTeam,
    zm_contracts::teams::TeamAction,
    Option<String>,
);

/// The longest reason a revoked rule keeps (characters).
pub const REVOKE_REASON_MAX: usize = 500;

/// How rules are listed: pinned first, then the newest promotion (one
/// with no date last, on both backends), then by id.
pub(crate) const RULE_ORDER: &str = "pinned DESC, (promoted_at IS NULL), promoted_at DESC, id";

/// Every rule `owner` holds, in [`RULE_ORDER`].
pub(crate) async fn rules_of(
    conn: &mut sqlx::AnyConnection,
    owner: &str,
) -> Result<Vec<RuleRecord>, ToolError> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT id, memory_id, text, layer, applies_scope, status, pinned, promoted_at FROM rules \
         WHERE owner_id = $1 ORDER BY {RULE_ORDER}"
    )))
    .bind(owner)
    .fetch_all(&mut *conn)
    .await
    .db("list rules")?;
    RuleRecord::from_rows(&rows)
}

/// The promoted rules for `team_scope` or a scope under it, of every
/// owner but `steward` (pinned first, then the newest promotion).
pub(crate) async fn promoted_for_scope(
    conn: &mut sqlx::AnyConnection,
    team_scope: &str,
    steward: &str,
) -> Result<Vec<RuleRecord>, ToolError> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT id, memory_id, text, layer, applies_scope, status, pinned, promoted_at FROM rules \
         WHERE status = $1 AND (applies_scope = $2 OR substr(applies_scope, 1, length($3)) = $3) \
         AND owner_id <> $4 ORDER BY {RULE_ORDER}"
    )))
    .bind(RuleState::Promoted.as_str())
    .bind(team_scope)
    .bind(format!("{team_scope}."))
    .bind(steward)
    .fetch_all(&mut *conn)
    .await
    .db("team rules")?;
    RuleRecord::from_rows(&rows)
}

impl Store {
    /// Promote one of the caller's memories to a standing rule.
    pub(crate) async fn promote_rule(
        &self,
        cx: &mut Cx<'_>,
        input: PromoteRuleInput,
    ) -> Result<PromoteRuleOutput, ToolError> {
        let caller = cx.caller;
        let id = input.memory_id.as_str();
        if let Some(text) = &input.rule_text
            && let Some(hit) = guard::check_fields([("rule_text".to_string(), text.as_str())])
        {
            return Err(guard::rejection(&hit));
        }
        let tx = cx.tx().await?;
        let row = sqlx::query(
            "SELECT id, content, scope, invalidated_at, visibility, kept_private FROM memories WHERE id = $1 AND owner_id = $2",
        )
        .bind(id)
        .bind(&caller.user_id)
        .fetch_optional(&mut *tx)
        .await
        .db("promote load")?;
        let Some(row) = row else {
            return Err(ToolError::not_found(format!("Memory {id} not found.")));
        };
        let source = RuleSource::from_row(&row)?;
        if source.invalidated_at.is_some() {
            return Err(ToolError::conflict(format!(
                "Memory {id} is invalidated; restore it before promoting it."
            )));
        }
        let memory_scope = source.scope;
        let memory_scope_read = memory_scope.clone();
        // The memory's own teams (PostgreSQL) are held before its row is,
        // below: by `may_set_rules_for` when the rule applies to the
        // memory's scope, here when it applies elsewhere.
        let (layer, applies) = match &input.applies_scope {
            Some(p) => {
                let path = canonical_path(caller, p.as_str());
                if !scope::is_shareable(&path) {
                    return Err(ToolError::validation(
                        "applies_scope must be a project or team scope (proj.… or team.…)",
                    ));
                }
                // Both scopes' teams in one statement (team-id order);
                // `may_set_rules_for` then holds rows already held.
                self.hold_teams_of(&mut *tx, &[&memory_scope, &path])
                    .await?;
                self.may_set_rules_for(&mut *tx, caller, &path).await?;
                (RuleLayer::Project, Some(path))
            }
            None if scope::is_personal(&memory_scope) => (RuleLayer::User, None),
            // The memory's own project or team scope: the same check (a
            // writer demoted to reader sets no rule for it either).
            None => {
                self.may_set_rules_for(&mut *tx, caller, &memory_scope)
                    .await?;
                (RuleLayer::Project, Some(memory_scope))
            }
        };
        // A private memory's own text does not become, by default, the
        // rule of the team scope it was kept private in: every member
        // there would receive it, and no share published the memory to
        // them (one kept private stays so when its project is shared
        // later; the rule would not). A rule in the caller's own words
        // (`rule_text`), or for a scope they name (`applies_scope`, as a
        // personal memory's project rule is), is theirs to publish.
        if let Some(path) = &applies
            && input.applies_scope.is_none()
            && input.rule_text.is_none()
            && source.private
            && (source.kept_private || self.team_reads(&mut *tx, path).await?)
        {
            return Err(ToolError::conflict(format!(
                "Memory {id} is private, and a rule from it would show its text to every member reading {path}: share the memory first (`share`), or pass `rule_text` in words meant for them, or `applies_scope` to publish it there on purpose."
            )));
        }
        let text = match input.rule_text.as_deref() {
            Some(t) => t.trim().to_string(),
            None if source.content.chars().count() > zm_contracts::MAX_RULE_TEXT => {
                return Err(field_error(
                    "rule_text",
                    format!(
                        "the memory holds {} characters, more than a rule may: pass `rule_text` (at most {} characters)",
                        source.content.chars().count(),
                        zm_contracts::MAX_RULE_TEXT
                    ),
                ));
            }
            None => source.content,
        };
        // On PostgreSQL a forget, a hand-over or a move may have committed
        // since the memory was read: hold it now (after its teams) and look
        // again, so that a forget either waits for this rule and retires
        // it, or wins and no rule is written. A move was checked for the
        // scope it left: the rule's layer and the role it needs are the
        // ones where the memory is now.
        match self.hold_memory_of(tx, &caller.user_id, id).await? {
            None => return Err(ToolError::not_found(format!("Memory {id} not found."))),
            Some(held) if held.invalidated_at.is_some() => {
                return Err(ToolError::conflict(format!(
                    "Memory {id} is invalidated; restore it before promoting it."
                )));
            }
            Some(held) if held.scope != memory_scope_read => {
                return Err(ToolError::conflict(format!(
                    "Memory {id} was moved to {} meanwhile; promote it again.",
                    held.scope
                )));
            }
            Some(_) => {}
        }
        // What the memory's rule was, read while it is held: a rule that
        // followed its memory onto this one (a supersede absorbed into it)
        // committed before, or waits for this rule. Only the caller's own
        // row counts: a giver's revoked row left on a memory handed over to
        // the caller asks nothing of them.
        // Held too (PostgreSQL) until the upsert below: a revocation from
        // the dashboard committed between this read and the upsert was
        // undone by it (promoted again without `force`, its reason wiped).
        let previous: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT status FROM rules WHERE memory_id = $1 AND owner_id = $2{}",
            self.backend.hold_rows()
        )))
        .bind(id)
        .bind(&caller.user_id)
        .fetch_optional(&mut *tx)
        .await
        .db("promote previous")?;
        let previous: Option<RuleState> = previous
            .map(|s| parse_stored(&s, "status", id))
            .transpose()?;
        if let Some(state @ (RuleState::Dismissed | RuleState::Revoked)) = previous
            && input.force != Some(true)
        {
            return Err(ToolError::conflict(format!(
                "The rule from memory {id} was {state}; pass force: true to promote it again."
            )));
        }
        let now = self.now();
        // A pin stays with a rule promoted again for where it was pinned,
        // and only there: each scope's pins are capped where they are
        // made ([`Store::may_pin`]), and a rule pinned among a person's
        // own, promoted again for a team, would pass that cap by the side
        // door (and push the team's own pins out of every briefing).
        sqlx::query(
            "INSERT INTO rules (id, owner_id, memory_id, text, layer, applies_scope, status, pinned, promoted_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, $8) \
             ON CONFLICT (memory_id) DO UPDATE SET owner_id = excluded.owner_id, text = excluded.text, layer = excluded.layer, applies_scope = excluded.applies_scope, \
             status = excluded.status, promoted_at = excluded.promoted_at, revoked_reason = NULL, \
             pinned = CASE WHEN rules.status = 'promoted' AND rules.owner_id = excluded.owner_id AND rules.layer = excluded.layer \
             AND (rules.applies_scope = excluded.applies_scope OR (rules.applies_scope IS NULL AND excluded.applies_scope IS NULL)) \
             THEN rules.pinned ELSE 0 END",
        )
        .bind(IdKind::RuleCandidate.generate())
        .bind(&caller.user_id)
        .bind(id)
        .bind(&text)
        .bind(layer.as_str())
        .bind(applies.clone())
        .bind(RuleState::Promoted.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await
        .db("promote upsert")?;
        let delivery_note = match layer {
            RuleLayer::User => "Active now for all your sessions, for 90 days unless pinned on the dashboard: new sessions receive it in their connect-time instructions, and every briefing (build_context with briefing: true), including this session's next one, lists it in rules[].".to_string(),
            RuleLayer::Project => format!(
                "Active for {} for 90 days unless pinned on the dashboard: every briefing whose read set includes it, including this session's next one, lists it in rules[].",
                applies.as_deref().unwrap_or("")
            ),
        };
        Ok(PromoteRuleOutput {
            memory_id: input.memory_id,
            rule_text: text,
            target_layer: layer,
            applies_scope: applies,
            status: RuleStatus::Promoted,
            delivery_note,
        })
    }

    /// May the caller set a rule every member of `path` receives? Its
    /// writers and admins may; taken in turn with the scope's team
    /// changes, like a write (`hold_teams_of`).
    async fn may_set_rules_for(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        path: &str,
    ) -> Result<(), ToolError> {
        self.hold_teams_of(&mut *tx, &[path]).await?;
        match self.role_in(&mut *tx, &caller.user_id, path).await? {
            None => Err(ToolError::not_found(format!("Scope {path} not found."))),
            Some(role) if !role.can_write() => Err(ToolError::forbidden(format!(
                "Setting a rule for {path} (promoting or pinning it) needs the writer or admin role there; yours is reader."
            ))),
            Some(_) => Ok(()),
        }
    }

    /// Change one of the caller's promoted rules. Pinning a rule that
    /// members of a project or team receive takes what promoting it took
    /// (the writer role there, now): a pinned rule leads every briefing and
    /// never expires. Unpinning and revoking stay the owner's at any role.
    /// A rule a team's steward holds (a departed member's) is revoked by
    /// the team's admins ([`Store::act_for_steward`]); nobody pins it.
    /// Run again when it lost to concurrent writes, as a tool's write is.
    async fn set_rule(
        &self,
        caller: &Caller,
        memory_id: &str,
        change: RuleChange<'_>,
    ) -> Result<(), ToolError> {
        crate::service::rerun_on_contention("rule change", move || {
            self.set_rule_once(caller, memory_id, change)
        })
        .await
    }

    /// One attempt at [`Store::set_rule`], in a transaction of its own.
    async fn set_rule_once(
        &self,
        caller: &Caller,
        memory_id: &str,
        change: RuleChange<'_>,
    ) -> Result<(), ToolError> {
        let mut tx = self.write_tx().await?;
        if matches!(change, RuleChange::Pin(true)) {
            self.may_pin(&mut tx, caller, memory_id).await?;
        }
        // Whose rule changes: the caller's own, or a steward's or a
        // member's that the caller revokes for their team (`for_team`,
        // with the action its audit log records).
        let (owner, for_team) = match change {
            RuleChange::Revoke { .. } => self.revoked_by(&mut tx, caller, memory_id).await?,
            RuleChange::Pin(_) => (caller.user_id.clone(), None),
        };
        let (command, mut payload) = match change {
            RuleChange::Pin(true) => ("rule.pin", serde_json::json!({"memory_id": memory_id})),
            RuleChange::Pin(false) => ("rule.unpin", serde_json::json!({"memory_id": memory_id})),
            // Free text goes to the audit log as its length only.
            RuleChange::Revoke { reason } => (
                "rule.revoke",
                serde_json::json!({"memory_id": memory_id, "reason_chars": reason.chars().count()}),
            ),
        };
        if let Some((team, _, _)) = &for_team {
            payload["team"] = serde_json::Value::String(team.slug.clone());
        }
        let mut sql = Sql::new("UPDATE rules SET ");
        match change {
            RuleChange::Pin(pinned) => {
                sql.push("pinned = ").bind_i64(i64::from(pinned));
            }
            RuleChange::Revoke { reason } => {
                sql.push("status = ")
                    .bind_str(RuleState::Revoked.as_str())
                    .push(", pinned = 0, revoked_reason = ")
                    .bind_str(reason);
            }
        }
        sql.push(" WHERE owner_id = ").bind_str(&owner);
        sql.push(" AND memory_id = ").bind_str(memory_id);
        sql.push(" AND status = ")
            .bind_str(RuleState::Promoted.as_str());
        // A member's rule revoked by their team's admin: still for the
        // scope that made it the team's when it was read (its author may
        // have promoted it again for another scope meanwhile, which no
        // lock of this team's held back).
        if let Some((_, _, Some(applies))) = &for_team {
            sql.push(" AND applies_scope = ").bind_str(applies);
        }
        let done = sql.query().execute(&mut *tx).await.db("update rule")?;
        if done.rows_affected() == 0 {
            return Err(ToolError::not_found(format!(
                "No rule from memory {memory_id}."
            )));
        }
        if let Some((team, action, _)) = &for_team {
            self.record_for_steward(&mut tx, caller, team, *action, memory_id)
                .await?;
        }
        // The dashboard's rule changes are audited like the tools' writes,
        // in the same transaction.
        let entry = crate::audit::AuditEntry {
            command,
            payload: &payload,
            outcome: Ok(()),
            duration_ms: 0,
        };
        self.audit_in(&mut tx, caller, &entry).await?;
        tx.commit().await.db("commit rule change")?;
        Ok(())
    }

    /// May the caller pin their promoted rule from memory `memory_id`? A
    /// rule members of a project or team receive takes the writer role
    /// there; and a layer of a briefing delivers at most
    /// [`PINNED_RULES_CAP_PER_LAYER`](crate::search::PINNED_RULES_CAP_PER_LAYER)
    /// pinned rules, so pinning more than that for one scope is refused
    /// (`conflict`). Counted per scope: the caller's user layer, or every
    /// member's pins for the same project or team. (A briefing's team or
    /// project layer gathers several teams or projects, and delivers the
    /// newest pins of all of them together, up to the same cap.)
    /// Pinning a pinned rule again changes nothing and counts nothing. A
    /// rule that is not there is left to the update to refuse.
    async fn may_pin(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        memory_id: &str,
    ) -> Result<(), ToolError> {
        let row = sqlx::query(
            "SELECT layer, applies_scope, pinned FROM rules WHERE owner_id = $1 AND memory_id = $2 AND status = $3",
        )
        .bind(&caller.user_id)
        .bind(memory_id)
        .bind(RuleState::Promoted.as_str())
        .fetch_optional(&mut *tx)
        .await
        .db("rule to pin")?;
        let Some(row) = row else {
            return Ok(());
        };
        let applies: Option<String> = col(&row, "applies_scope")?;
        if let Some(path) = &applies {
            self.may_set_rules_for(tx, caller, path).await?;
        }
        if flag_col(&row, "pinned")? {
            return Ok(());
        }
        let layer: String = col(&row, "layer")?;
        let mut sql = Sql::new("SELECT COUNT(*) AS n FROM rules WHERE status = ");
        sql.bind_str(RuleState::Promoted.as_str())
            .push(" AND pinned = 1 AND ");
        let (cap, layer_named) = (
            crate::search::PINNED_RULES_CAP_PER_LAYER,
            match &applies {
                Some(path) if layer != RuleLayer::User.as_str() => {
                    sql.push("applies_scope = ").bind_str(path);
                    format!("for {path}")
                }
                _ => {
                    sql.push("layer = ")
                        .bind_str(RuleLayer::User.as_str())
                        .push(" AND owner_id = ")
                        .bind_str(&caller.user_id);
                    "for all your sessions".to_string()
                }
            },
        );
        let row = sql.query().fetch_one(&mut *tx).await.db("pinned rules")?;
        let pinned: i64 = col(&row, "n")?;
        if usize::try_from(pinned).unwrap_or(usize::MAX) >= cap {
            return Err(ToolError::conflict(format!(
                "{pinned} rules are pinned {layer_named} already, as many as a layer of a briefing delivers: unpin one first."
            )));
        }
        Ok(())
    }

    /// Whose promoted rule from memory `memory_id` the caller revokes:
    /// their own; one their team's steward holds, or one a current member
    /// promoted for the team's scopes, while they are the team's admin
    /// (with the team, held in turn with its changes, and the action its
    /// audit log records). A rule the caller may not revoke reads as
    /// missing, as a foreign id does, unless it is their team's
    /// (`forbidden` below admin).
    async fn revoked_by(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        memory_id: &str,
    ) -> Result<(String, Option<RevokedForTeam>), ToolError> {
        let missing = || ToolError::not_found(format!("No rule from memory {memory_id}."));
        let row = sqlx::query(
            "SELECT r.owner_id AS owner_id, r.applies_scope AS applies_scope, m.scope AS scope \
             FROM rules r JOIN memories m ON m.id = r.memory_id \
             WHERE r.memory_id = $1 AND r.status = $2",
        )
        .bind(memory_id)
        .bind(RuleState::Promoted.as_str())
        .fetch_optional(&mut *tx)
        .await
        .db("rule to revoke")?;
        let Some(row) = row else {
            return Err(missing());
        };
        let owner: String = col(&row, "owner_id")?;
        if owner == caller.user_id {
            return Ok((owner, None));
        }
        let applies: Option<String> = col(&row, "applies_scope")?;
        if let Some(team) = self
            .moderated_rule_team(tx, caller, &owner, applies.as_deref())
            .await?
        {
            let action = zm_contracts::teams::TeamAction::MemberRuleRevoked;
            return Ok((owner, Some((team, action, applies))));
        }
        let scope: String = col(&row, "scope")?;
        let team = self
            .act_for_steward(
                tx,
                caller,
                &owner,
                &scope,
                "Revoking a rule a departed member left to the team",
                missing,
            )
            .await?;
        let action = zm_contracts::teams::TeamAction::StewardRuleRevoked;
        Ok((owner, Some((team, action, None))))
    }

    /// Revoke `owner`'s promoted rule from memory `memory_id`, if any,
    /// because the memory was invalidated (forgotten or closed; `owner` is
    /// the memory's, which a team's admin may invalidate for its steward).
    /// Re-promoting it needs `force`, as after any revocation.
    pub(crate) async fn retire_rule_of(
        &self,
        tx: &mut sqlx::AnyConnection,
        owner: &str,
        memory_id: &str,
    ) -> Result<(), ToolError> {
        let mut sql = Sql::new("UPDATE rules SET status = ");
        sql.bind_str(RuleState::Revoked.as_str())
            .push(", pinned = 0, revoked_reason = ")
            .bind_str("memory invalidated")
            .push(" WHERE owner_id = ")
            .bind_str(owner)
            .push(" AND memory_id = ")
            .bind_str(memory_id)
            .push(" AND status = ")
            .bind_str(RuleState::Promoted.as_str());
        sql.query().execute(&mut *tx).await.db("retire rule")?;
        Ok(())
    }

    /// Pin or unpin a promoted rule (pinned rules lead and never expire).
    pub async fn pin_rule(
        &self,
        caller: &Caller,
        memory_id: &str,
        pinned: bool,
    ) -> Result<(), ToolError> {
        self.set_rule(caller, memory_id, RuleChange::Pin(pinned))
            .await
    }

    /// Revoke a promoted rule (terminal until re-promoted with force): the
    /// caller's own, or, for a team's admin, one the team's steward holds.
    pub async fn revoke_rule(
        &self,
        caller: &Caller,
        memory_id: &str,
        reason: &str,
    ) -> Result<(), ToolError> {
        let reason = reason.trim();
        let chars = reason.chars().count();
        if chars == 0 || chars > REVOKE_REASON_MAX {
            let why =
                format!("say why the rule is revoked, in 1 to {REVOKE_REASON_MAX} characters");
            return Err(ToolError::validation(format!("reason: {why}"))
                .with_details(serde_json::json!({"fields": [{"path": "reason", "reason": why}]})));
        }
        self.set_rule(caller, memory_id, RuleChange::Revoke { reason })
            .await
    }

    /// All the caller's rules, for management.
    pub async fn list_rules(&self, caller: &Caller) -> Result<Vec<RuleRecord>, ToolError> {
        let mut conn = self.pool.acquire().await.db("acquire")?;
        rules_of(&mut conn, &caller.user_id).await
    }

    /// The user-layer rules for connect-time instructions, pinned first,
    /// with the briefing's cap and TTL.
    pub async fn user_rules(&self, caller: &Caller) -> Result<Vec<Rule>, ToolError> {
        self.rules_for(caller, &ReadSet::Scopes(Vec::new())).await
    }

    /// What `zm://rules` serves: the user layer, the caller's teams' own
    /// rules, and the attached project's rules (no other project's, as in
    /// a briefing).
    pub async fn rules_resource(&self, caller: &Caller) -> Result<Vec<Rule>, ToolError> {
        let set = match &caller.attached_project {
            Some(p) => crate::scopes::pinned_read_set(caller, p),
            None => ReadSet::Scopes(Vec::new()),
        };
        self.rules_for(caller, &set).await
    }
}
