//! Every tool's typed handler, one line each: the store operation behind
//! it. Read tools receive the caller only — they have no transaction to
//! write with; write tools receive the call context and its transaction.

use zm_contracts::ToolError;
use zm_contracts::catalogue::tool;

use super::{Cx, Handler};
use crate::store::Store;

macro_rules! read {
    ($($marker:ident => $method:ident;)*) => {$(
        impl Handler for tool::$marker {
            async fn handle(
                store: &Store,
                cx: &mut Cx<'_>,
                input: Self::Input,
            ) -> Result<Self::Output, ToolError> {
                store.$method(cx.caller, input).await
            }
        }
    )*};
}

macro_rules! write {
    ($($marker:ident => $method:ident;)*) => {$(
        impl Handler for tool::$marker {
            async fn handle(
                store: &Store,
                cx: &mut Cx<'_>,
                input: Self::Input,
            ) -> Result<Self::Output, ToolError> {
                store.$method(cx, input).await
            }
        }
    )*};
}

read! {
    Recall => recall;
    BuildContext => build_context;
    Entities => entities;
    ListConflicts => list_conflicts;
    GetConflict => get_conflict;
    ExportMemories => export_memories;
}

write! {
    Remember => remember;
    Forget => forget;
    RestoreMemory => restore_memory;
    CloseLoop => close_loop;
    Share => share;
    MoveMemories => move_memories;
    Link => link;
    Challenge => challenge;
    ResolveConflict => resolve_conflict;
    PromoteRule => promote_rule;
    ImportMemory => import_memory;
    DeleteAccount => delete_account;
}
