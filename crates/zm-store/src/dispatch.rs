//! One entry point for every tool: raw JSON in, contract JSON out. MCP and
//! REST both call this, so they share validation, behaviour and auditing.

use std::time::Instant;

use serde::Serialize;
use serde_json::Value;
use zm_contracts::catalogue::tool;
use zm_contracts::{ToolContract, ToolError, ToolName, parse_input};

use crate::audit::{AuditEntry, audit_payload};
use crate::store::{Caller, Store};

fn to_value<T: Serialize>(out: T) -> Result<Value, ToolError> {
    serde_json::to_value(out).map_err(|e| crate::db::internal("serialise output", e))
}

impl Store {
    /// Validate `raw` for `tool`, run it for `caller`, audit write commands,
    /// and return the output as JSON.
    pub async fn call_tool(
        &self,
        caller: &Caller,
        tool: ToolName,
        raw: &Value,
    ) -> Result<Value, ToolError> {
        let started = Instant::now();
        let result = self.run_tool(caller, tool, raw).await;
        if !tool.spec().annotations.read_only_hint {
            let payload = audit_payload(raw);
            self.audit(
                caller,
                AuditEntry {
                    command: tool.as_str(),
                    payload,
                    outcome: result.as_ref().map(|_| ()),
                    duration_ms: started.elapsed().as_millis() as i64,
                },
            )
            .await;
        }
        result
    }

    async fn run_tool(
        &self,
        caller: &Caller,
        tool: ToolName,
        raw: &Value,
    ) -> Result<Value, ToolError> {
        fn input<T: ToolContract>(raw: &Value) -> Result<T::Input, ToolError> {
            parse_input::<T::Input>(raw)
        }
        match tool {
            ToolName::Remember => {
                to_value(self.remember(caller, input::<tool::Remember>(raw)?).await?)
            }
            ToolName::Recall => to_value(self.recall(caller, input::<tool::Recall>(raw)?).await?),
            ToolName::BuildContext => to_value(
                self.build_context(caller, input::<tool::BuildContext>(raw)?)
                    .await?,
            ),
            ToolName::Forget => to_value(self.forget(caller, input::<tool::Forget>(raw)?).await?),
            ToolName::RestoreMemory => to_value(
                self.restore_memory(caller, input::<tool::RestoreMemory>(raw)?)
                    .await?,
            ),
            ToolName::CloseLoop => to_value(
                self.close_loop(caller, input::<tool::CloseLoop>(raw)?)
                    .await?,
            ),
            ToolName::Share => to_value(self.share(caller, input::<tool::Share>(raw)?).await?),
            ToolName::MoveMemories => to_value(
                self.move_memories(caller, input::<tool::MoveMemories>(raw)?)
                    .await?,
            ),
            ToolName::Link => to_value(self.link(caller, input::<tool::Link>(raw)?).await?),
            ToolName::Entities => {
                to_value(self.entities(caller, input::<tool::Entities>(raw)?).await?)
            }
            ToolName::Challenge => to_value(
                self.challenge(caller, input::<tool::Challenge>(raw)?)
                    .await?,
            ),
            ToolName::ListConflicts => to_value(
                self.list_conflicts(caller, input::<tool::ListConflicts>(raw)?)
                    .await?,
            ),
            ToolName::GetConflict => to_value(
                self.get_conflict(caller, input::<tool::GetConflict>(raw)?)
                    .await?,
            ),
            ToolName::ResolveConflict => to_value(
                self.resolve_conflict(caller, input::<tool::ResolveConflict>(raw)?)
                    .await?,
            ),
            ToolName::PromoteRule => to_value(
                self.promote_rule(caller, input::<tool::PromoteRule>(raw)?)
                    .await?,
            ),
            ToolName::ImportMemory => to_value(
                self.import_memory(caller, input::<tool::ImportMemory>(raw)?)
                    .await?,
            ),
            ToolName::ExportMemories => to_value(
                self.export_memories(caller, input::<tool::ExportMemories>(raw)?)
                    .await?,
            ),
            ToolName::DeleteAccount => {
                input::<tool::DeleteAccount>(raw)?;
                to_value(self.delete_account(caller).await?)
            }
        }
    }
}
