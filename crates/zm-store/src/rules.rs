//! Standing rules: `promote_rule`, and pin / unpin / revoke / dismiss for
//! the dashboard; delivery for instructions and `zm://rules`.

use sqlx::Row;
use zm_contracts::scope;
use zm_contracts::{
    IdKind, PromoteRuleInput, PromoteRuleOutput, Rule, RuleLayer, RuleStatus, ToolError,
};

use crate::db::DbResult;
use crate::guard;
use crate::scopes::{ReadSet, canonical_path};
use crate::service::Cx;
use crate::store::{Caller, Store};

/// A rule as the owner manages it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRecord {
    pub id: String,
    pub memory_id: String,
    pub text: String,
    pub layer: String,
    pub applies_scope: Option<String>,
    pub status: String,
    pub pinned: bool,
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
            "SELECT content, scope, invalidated_at FROM memories WHERE id = $1 AND owner_id = $2",
        )
        .bind(id)
        .bind(&caller.user_id)
        .fetch_optional(&mut *tx)
        .await
        .db("promote load")?;
        let Some(row) = row else {
            return Err(ToolError::not_found(format!("Memory {id} not found.")));
        };
        if row.get::<Option<i64>, _>("invalidated_at").is_some() {
            return Err(ToolError::conflict(format!(
                "Memory {id} is invalidated; restore it before promoting it."
            )));
        }
        let previous: Option<String> =
            sqlx::query_scalar("SELECT status FROM rules WHERE memory_id = $1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .db("promote previous")?;
        if matches!(previous.as_deref(), Some("dismissed" | "revoked")) && input.force != Some(true)
        {
            return Err(ToolError::conflict(format!(
                "The rule from memory {id} was {}; pass force: true to promote it again.",
                previous.unwrap_or_default()
            )));
        }
        let memory_scope: String = row.get("scope");
        let (layer, applies) = match &input.applies_scope {
            Some(p) => {
                let path = canonical_path(caller, p.as_str());
                if !scope::is_shareable(&path) {
                    return Err(ToolError::validation(
                        "applies_scope must be a project or team scope (proj.… or team.…)",
                    ));
                }
                if self
                    .role_in(&mut *tx, &caller.user_id, &path)
                    .await?
                    .is_none()
                {
                    return Err(ToolError::not_found(format!("Scope {path} not found.")));
                }
                (RuleLayer::Project, Some(path))
            }
            None if scope::is_personal(&memory_scope) => (RuleLayer::User, None),
            None => (RuleLayer::Project, Some(memory_scope)),
        };
        let text = input
            .rule_text
            .as_deref()
            .map(str::trim)
            .map(str::to_string)
            .unwrap_or_else(|| row.get("content"));
        let now = self.now();
        sqlx::query(
            "INSERT INTO rules (id, owner_id, memory_id, text, layer, applies_scope, status, pinned, promoted_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 'promoted', 0, $7, $7) \
             ON CONFLICT (memory_id) DO UPDATE SET text = excluded.text, layer = excluded.layer, applies_scope = excluded.applies_scope, \
             status = 'promoted', promoted_at = excluded.promoted_at, revoked_reason = NULL",
        )
        .bind(IdKind::RuleCandidate.generate())
        .bind(&caller.user_id)
        .bind(id)
        .bind(&text)
        .bind(layer.as_str())
        .bind(applies.clone())
        .bind(now)
        .execute(&mut *tx)
        .await
        .db("promote upsert")?;
        let delivery_note = match layer {
            RuleLayer::User => "Active now for all your sessions: new sessions receive it in their connect-time instructions, and every briefing (build_context with briefing: true), including this session's next one, lists it in rules[].".to_string(),
            RuleLayer::Project => format!(
                "Active for the project {}: every briefing whose read set includes that project, including this session's next one, lists it in rules[].",
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

    async fn set_rule(
        &self,
        caller: &Caller,
        memory_id: &str,
        set: &str,
        value: Option<String>,
        from: &[&str],
    ) -> Result<(), ToolError> {
        let mut sql = crate::sql::Sql::new("UPDATE rules SET ");
        sql.push(set);
        if let Some(v) = value {
            sql.push(" = ").bind_str(v);
        }
        sql.push(" WHERE owner_id = ").bind_str(&caller.user_id);
        sql.push(" AND memory_id = ").bind_str(memory_id);
        sql.push(" AND status IN ")
            .bind_list(from.iter().map(|s| s.to_string()));
        let done = sql.query().execute(&self.pool).await.db("update rule")?;
        if done.rows_affected() == 0 {
            return Err(ToolError::not_found(format!(
                "No rule from memory {memory_id}."
            )));
        }
        Ok(())
    }

    /// Pin or unpin a promoted rule (pinned rules lead and never expire).
    pub async fn pin_rule(
        &self,
        caller: &Caller,
        memory_id: &str,
        pinned: bool,
    ) -> Result<(), ToolError> {
        let set = if pinned { "pinned = 1" } else { "pinned = 0" };
        self.set_rule(caller, memory_id, set, None, &["promoted"])
            .await
    }

    /// Revoke a promoted rule (terminal until re-promoted with force).
    pub async fn revoke_rule(
        &self,
        caller: &Caller,
        memory_id: &str,
        reason: &str,
    ) -> Result<(), ToolError> {
        self.set_rule(
            caller,
            memory_id,
            "status = 'revoked', pinned = 0, revoked_reason",
            Some(reason.to_string()),
            &["promoted"],
        )
        .await
    }

    /// All the caller's rules, for management.
    pub async fn list_rules(&self, caller: &Caller) -> Result<Vec<RuleRecord>, ToolError> {
        let rows = sqlx::query("SELECT id, memory_id, text, layer, applies_scope, status, pinned FROM rules WHERE owner_id = $1 ORDER BY pinned DESC, promoted_at DESC, id")
            .bind(&caller.user_id)
            .fetch_all(&self.pool)
            .await
            .db("list rules")?;
        Ok(rows
            .iter()
            .map(|r| RuleRecord {
                id: r.get("id"),
                memory_id: r.get("memory_id"),
                text: r.get("text"),
                layer: r.get("layer"),
                applies_scope: r.get("applies_scope"),
                status: r.get("status"),
                pinned: r.get::<i64, _>("pinned") != 0,
            })
            .collect())
    }

    /// The user-layer rules for connect-time instructions, pinned first,
    /// with the briefing's cap and TTL.
    pub async fn user_rules(&self, caller: &Caller) -> Result<Vec<Rule>, ToolError> {
        self.rules_for(caller, &ReadSet::Scopes(Vec::new())).await
    }

    /// What `zm://rules` serves: the user layer plus the attached project's rules.
    pub async fn rules_resource(&self, caller: &Caller) -> Result<Vec<Rule>, ToolError> {
        let set = match &caller.attached_project {
            Some(p) => self.pinned_read_set(caller, p),
            None => ReadSet::Scopes(Vec::new()),
        };
        self.rules_for(caller, &set).await
    }
}
