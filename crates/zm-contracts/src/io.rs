//! Inputs and outputs of the 18 tools.
//!
//! Inputs reject unknown fields; their `garde` rules are the constraints and
//! show up in the JSON Schemas. Parse raw JSON through
//! [`crate::validate::parse_input`], never with `serde_json` directly.

use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::enums::*;
use crate::ids::{MemoryId, UserId};
use crate::scope::{ReadScope, ScopePath, WriteScope};
use crate::shapes::*;

/// How many memory kinds there are: the most a `kinds` filter can list.
pub const MEMORY_KINDS: usize = MemoryKind::ALL.len();

/// Longest accepted free-text hint/name/query field.
pub const MAX_SHORT_TEXT: usize = 2048;

/// The longest `thread` token: long enough for a token pinned to any scope
/// (a scope is at most [`crate::scope::MAX_SCOPE_LEN`] bytes), a
/// teammate's shared project or a team's project included. Contract 4.7.0
/// widened it from 128, which left a long teammate's project without one.
pub const MAX_THREAD_TOKEN: usize = 384;

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "garde's custom-validator signature"
)]
fn not_blank(value: &str, _: &()) -> garde::Result {
    if value.trim().is_empty() {
        Err(garde::Error::new("must not be empty or only whitespace"))
    } else {
        Ok(())
    }
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    clippy::ref_option,
    reason = "garde's custom-validator signature"
)]
fn opt_not_blank(value: &Option<String>, ctx: &()) -> garde::Result {
    match value {
        Some(v) => not_blank(v, ctx),
        None => Ok(()),
    }
}

fn default_k() -> u32 {
    10
}

fn default_conflict_limit() -> u32 {
    20
}

fn default_status() -> ConflictStatus {
    ConflictStatus::Pending
}

// ---------------------------------------------------------------- remember

/// An entity named as the subject of a memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct EntityMention {
    /// The entity's name (e.g. `zero-memory`, `PostgreSQL`, `Alice`).
    #[garde(length(chars, min = 1, max = 200), custom(not_blank))]
    pub name: String,
    /// Its type; `concept` when omitted.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub entity_type: Option<EntityType>,
}

/// A typed link from the new memory to an existing one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct MemoryLinkInput {
    /// The existing memory.
    #[garde(skip)]
    pub dst: MemoryId,
    /// `supersedes` retires `dst` (and closes it if it is an open loop).
    #[serde(rename = "type")]
    #[garde(skip)]
    pub link_type: MemoryLinkType,
}

/// Input of `remember`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct RememberInput {
    /// One atomic, self-contained fact, in English.
    #[garde(length(chars, min = 1), custom(not_blank))]
    pub content: String,
    /// What the memory is.
    #[serde(default)]
    #[garde(skip)]
    pub kind: MemoryKind,
    /// The `thr_…` token from an earlier `session.thread`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = MAX_THREAD_TOKEN))]
    pub thread: Option<String>,
    /// Where to store it: `core`, `personal`, or a scope path. Omit to route by project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub scope: Option<WriteScope>,
    /// Repo root path, git remote URL or project name; used when `scope` is absent, and for a project-bound kind written to `core` or `personal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = MAX_SHORT_TEXT), custom(opt_not_blank))]
    pub project_hint: Option<String>,
    /// The memory's subjects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(max = 20), dive)]
    pub entities: Option<Vec<EntityMention>>,
    /// Links to existing memories (`supersedes` retires them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(max = 10), dive)]
    pub links: Option<Vec<MemoryLinkInput>>,
    /// The user's original wording, kept in provenance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(min = 1))]
    pub verbatim: Option<String>,
}

/// Output of `remember`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RememberOutput {
    /// The new memory, or the existing one that absorbed the write.
    pub memory_id: MemoryId,
    /// True when an identical memory of the same kind in the same scope absorbed the write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deduplicated: Option<bool>,
    /// The scope the memory lives in.
    pub scope: String,
    /// Near-duplicates: candidates this memory may supersede.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub similar_existing: Option<Vec<SimilarMemory>>,
    /// Guidance shown with `similar_existing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Advice when the content is long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_directive: Option<String>,
    /// Entity names the memory was attached to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchors: Option<Vec<String>>,
    /// Guidance for decisions without a named subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor_hint: Option<String>,
    /// Why a `core`/`personal` write was stored in the project instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed_to_project: Option<String>,
    /// What the connection carries into the next call.
    pub session: SessionState,
}

// ---------------------------------------------------------------- recall

/// Input of `recall`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct RecallInput {
    /// What to look for, in English.
    #[garde(length(chars, min = 1, max = MAX_SHORT_TEXT), custom(not_blank))]
    pub query: String,
    /// The `thr_…` token from an earlier `session.thread`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = MAX_THREAD_TOKEN))]
    pub thread: Option<String>,
    /// Scopes to search; `["*"]` = everything visible. Omit for the default read set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(min = 1, max = 50))]
    pub scopes: Option<Vec<ReadScope>>,
    /// Only these kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(min = 1, max = MEMORY_KINDS))]
    pub kinds: Option<Vec<MemoryKind>>,
    /// How many hits (1..100).
    #[serde(default = "default_k")]
    #[garde(range(min = 1, max = 100))]
    pub k: u32,
    /// Attach each hit's entities.
    #[serde(default)]
    #[garde(skip)]
    pub include_graph: bool,
    /// Pins the read to a project; ignored when `scopes` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = MAX_SHORT_TEXT), custom(opt_not_blank))]
    pub project_hint: Option<String>,
}

/// Output of `recall`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecallOutput {
    pub memories: Vec<SearchHit>,
    /// The project the read was pinned to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_scope: Option<String>,
    /// What the connection carries into the next call.
    pub session: SessionState,
    /// Graph neighbours of the hits (at most 2 per hit, 8 in all).
    #[serde(default)]
    pub related: Vec<RelatedStub>,
}

// ---------------------------------------------------------------- build_context

/// Input of `build_context`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct BuildContextInput {
    /// The task or subject to brief on, in English.
    #[garde(length(chars, min = 1, max = MAX_SHORT_TEXT), custom(not_blank))]
    pub topic: String,
    /// The `thr_…` token from an earlier `session.thread`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = MAX_THREAD_TOKEN))]
    pub thread: Option<String>,
    /// Size budget; sets how many memories and entities come back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(range(min = 1, max = 1_000_000))]
    pub max_tokens: Option<u32>,
    /// Scopes to read; `["*"]` = everything visible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(min = 1, max = 50))]
    pub scopes: Option<Vec<ReadScope>>,
    /// Session/task briefing: adds recent memories, rules and open loops.
    #[serde(default)]
    #[garde(skip)]
    pub briefing: bool,
    /// Repo root path, git remote URL or project name; pins the read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = MAX_SHORT_TEXT), custom(opt_not_blank))]
    pub project_hint: Option<String>,
    /// Metering label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub briefing_kind: Option<BriefingKind>,
    /// The client's conversation id; asserts the thread for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = 256))]
    pub conversation_id: Option<String>,
}

/// Output of `build_context`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BuildContextOutput {
    pub memories: Vec<ContextMemory>,
    pub entities: Vec<ContextEntity>,
    pub edges: Vec<ContextEdge>,
    pub linked_memories: Vec<ContextMemory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_scope: Option<String>,
    #[serde(default)]
    pub recent: Vec<ContextMemory>,
    #[serde(default)]
    pub rules: Vec<Rule>,
    #[serde(default)]
    pub open_loops: Vec<ContextMemory>,
    #[serde(default)]
    pub open_loops_total: u32,
    /// What the connection carries into the next call.
    pub session: SessionState,
}

// ---------------------------------------------------------------- lifecycle

/// Input of `forget`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct ForgetInput {
    #[garde(skip)]
    pub memory_id: MemoryId,
    /// Why you forget it. Not stored: the audit log records only its length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = MAX_SHORT_TEXT))]
    pub reason: Option<String>,
}

/// Output of `forget`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ForgetOutput {
    pub memory_id: MemoryId,
    pub invalidated: bool,
}

/// Input of `restore_memory`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct RestoreMemoryInput {
    #[garde(skip)]
    pub memory_id: MemoryId,
}

/// Output of `restore_memory`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RestoreMemoryOutput {
    pub memory_id: MemoryId,
    pub restored: bool,
}

/// Input of `close_loop`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct CloseLoopInput {
    #[garde(skip)]
    pub memory_id: MemoryId,
}

/// Output of `close_loop`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CloseLoopOutput {
    pub memory_id: MemoryId,
    pub closed: bool,
}

// ---------------------------------------------------------------- sharing

/// Input of `share`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct ShareInput {
    #[garde(skip)]
    pub memory_id: MemoryId,
    /// The shareable (`proj.…` or `team.…`) scope to widen the memory into.
    #[garde(skip)]
    pub scope: ScopePath,
}

/// Output of `share`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ShareOutput {
    pub memory_id: MemoryId,
    pub scope: String,
    pub shared: bool,
}

/// Input of `move_memories`. Give `scope` or `project_hint`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct MoveMemoriesInput {
    /// The memories to move (1..200).
    #[garde(length(min = 1, max = 200))]
    pub memory_ids: Vec<MemoryId>,
    /// The target project or team scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub scope: Option<ScopePath>,
    /// The target project, by repo path, remote or name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = MAX_SHORT_TEXT), custom(opt_not_blank))]
    pub project_hint: Option<String>,
}

/// One memory `move_memories` could not move.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MoveFailure {
    pub memory_id: MemoryId,
    /// Why, as `share`'s refusal of it would be coded: `not_found` (no
    /// such memory, or not one you can read), `forbidden` (shared where
    /// your role is reader), `conflict` (a teammate's; forgotten, closed
    /// or superseded). Branch on this, not on `error`.
    pub code: crate::ErrorCode,
    /// Why, in words.
    pub error: String,
}

/// Output of `move_memories`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MoveMemoriesOutput {
    pub scope: String,
    pub moved: Vec<MemoryId>,
    pub failed: Vec<MoveFailure>,
}

// ---------------------------------------------------------------- graph

/// Input of `link`: two memory ids, or two entity names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct LinkInput {
    /// A `mem_…` id or an entity name.
    #[garde(length(chars, min = 1, max = 200), custom(not_blank))]
    pub src: String,
    /// A `mem_…` id or an entity name (the same kind as `src`).
    #[garde(length(chars, min = 1, max = 200), custom(not_blank))]
    pub dst: String,
    /// An edge type for entities, a memory-link type for memories.
    #[serde(rename = "type")]
    #[garde(skip)]
    pub link_type: LinkType,
}

/// Output of `link`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LinkOutput {
    pub kind: LinkKind,
    pub src_id: String,
    pub dst_id: String,
    #[serde(rename = "type")]
    pub link_type: LinkType,
    /// False when the link already existed.
    pub created: bool,
}

/// Input of `entities`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct EntitiesInput {
    /// Name search; omit to list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = 200))]
    pub query: Option<String>,
    /// One scope to list; omit for every visible scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub scope: Option<ReadScope>,
}

/// Output of `entities`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EntitiesOutput {
    pub entities: Vec<Entity>,
}

// ---------------------------------------------------------------- conflicts

/// Input of `challenge`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct ChallengeInput {
    #[garde(skip)]
    pub memory_id: MemoryId,
    /// What is wrong with it.
    #[garde(length(chars, min = 1, max = 4000), custom(not_blank))]
    pub reason: String,
    /// What shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, max = 4000))]
    pub evidence: Option<String>,
}

/// Output of `challenge`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChallengeOutput {
    pub dispute_id: String,
    /// True when a pending challenge already existed (it is returned).
    pub already_pending: bool,
}

/// Input of `list_conflicts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct ListConflictsInput {
    /// Which conflicts; `pending` when omitted.
    #[serde(default = "default_status")]
    #[garde(skip)]
    pub status: ConflictStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub verdict: Option<ConflictVerdict>,
    #[serde(default = "default_conflict_limit")]
    #[garde(range(min = 1, max = 100))]
    pub limit: u32,
    /// The previous page's `next_cursor`; omit for the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = MAX_PAGE_CURSOR))]
    pub cursor: Option<String>,
}

/// Output of `list_conflicts`: one page, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListConflictsOutput {
    pub conflicts: Vec<Conflict>,
    /// Pass it as `cursor` (same `status` and `verdict`) for the next, older page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Input of `get_conflict`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct GetConflictInput {
    /// The conflict's `dispute_id`.
    #[garde(length(chars, min = 1, max = 128))]
    pub dispute_id: String,
}

/// Output of `get_conflict`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetConflictOutput {
    pub conflict: Conflict,
}

/// Input of `resolve_conflict`. Precedence: `retire` > `keep_both` > `winner`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct ResolveConflictInput {
    #[garde(length(chars, min = 1, max = 128))]
    pub dispute_id: String,
    /// The side that stays; the other is superseded by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub winner: Option<MemoryId>,
    /// Both stay (pair), or the challenged memory is upheld.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub keep_both: Option<bool>,
    /// Retire the challenged memory (single-subject conflicts only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub retire: Option<bool>,
}

/// Output of `resolve_conflict`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResolveConflictOutput {
    pub resolved: bool,
}

// ---------------------------------------------------------------- rules

/// Input of `promote_rule`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct PromoteRuleInput {
    #[garde(skip)]
    pub memory_id: MemoryId,
    /// A project scope the rule applies to; omit to derive it from the memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub applies_scope: Option<ScopePath>,
    /// The rule as an imperative sentence; defaults to the memory's content, which must then fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = MAX_RULE_TEXT), custom(opt_not_blank))]
    pub rule_text: Option<String>,
    /// Re-promote a rule that was dismissed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub force: Option<bool>,
}

/// The longest rule text, in characters: `rule_text`, or the memory's
/// content standing in for it.
pub const MAX_RULE_TEXT: usize = 2000;

/// Output of `promote_rule`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PromoteRuleOutput {
    pub memory_id: MemoryId,
    pub rule_text: String,
    pub target_layer: RuleLayer,
    pub applies_scope: Option<String>,
    pub status: RuleStatus,
    /// When and where the rule will be delivered.
    pub delivery_note: String,
}

// ---------------------------------------------------------------- import / export / account

/// Input of `import_memory`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct ImportMemoryInput {
    #[garde(length(chars, min = 1), custom(not_blank))]
    pub content: String,
    #[garde(skip)]
    pub kind: MemoryKind,
    #[garde(skip)]
    pub target: ImportTarget,
    /// Required when `target` is `project`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = MAX_SHORT_TEXT), custom(opt_not_blank))]
    pub project_hint: Option<String>,
    /// The tool the memory came from (e.g. `claude-code`, `cursor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = 200))]
    pub source_tool: Option<String>,
    /// The file it came from.
    #[garde(length(chars, min = 1, max = 4096))]
    pub source_path: String,
    /// Content hash (e.g. sha256); the idempotency key.
    #[garde(length(chars, min = 1, max = 256), custom(not_blank))]
    pub source_hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1))]
    pub verbatim: Option<String>,
}

/// Output of `import_memory`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ImportMemoryOutput {
    /// True when this `source_hash` was imported before.
    pub skipped: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_id: Option<MemoryId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deduplicated: Option<bool>,
}

/// Memories in one `export_memories` page when `limit` is absent.
pub const EXPORT_PAGE_DEFAULT: u32 = 500;

/// The most memories one `export_memories` page holds.
pub const EXPORT_PAGE_MAX: u32 = 1000;

/// The text one `export_memories` page carries at most, in characters of
/// its memories' content and provenance: a page ends early, after the
/// memory that passes it (a page always holds at least one). A thousand
/// memories at the highest text limit would otherwise be gigabytes in one
/// answer.
pub const EXPORT_PAGE_CHARS: u64 = 8 * 1024 * 1024;

/// Longest accepted page cursor, `export_memories`' or `list_conflicts'`
/// (the server issues far shorter).
pub const MAX_PAGE_CURSOR: usize = 128;

fn default_export_limit() -> u32 {
    EXPORT_PAGE_DEFAULT
}

/// Input of `export_memories`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct ExportMemoriesInput {
    /// Scopes to export; omit for everything readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(min = 1, max = 50))]
    pub scopes: Option<Vec<ReadScope>>,
    /// The previous page's `next_cursor`; omit for the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = MAX_PAGE_CURSOR))]
    pub cursor: Option<String>,
    /// Memories per page (at most 1000).
    #[serde(default = "default_export_limit")]
    #[garde(range(min = 1, max = EXPORT_PAGE_MAX))]
    pub limit: u32,
}

impl ExportMemoriesInput {
    /// The first page of everything readable, `limit` memories at most.
    pub fn first_page(limit: u32) -> ExportMemoriesInput {
        ExportMemoriesInput {
            scopes: None,
            cursor: None,
            limit,
        }
    }
}

/// Output of `export_memories`: one page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExportMemoriesOutput {
    /// This page's memories, oldest first.
    pub items: Vec<ExportedMemory>,
    /// How many memories this page holds.
    pub count: u32,
    /// Pass it as `cursor` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Input of `delete_account` (no fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct DeleteAccountInput {}

/// Output of `delete_account`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeleteAccountOutput {
    pub subject: UserId,
    pub auth_deleted: bool,
    pub memories: u64,
    pub entities: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kinds_filter_is_bounded_by_the_number_of_kinds() {
        let schema = crate::schema_of::<RecallInput>();
        let kinds = &schema["properties"]["kinds"];
        assert_eq!(kinds["maxItems"], MEMORY_KINDS, "{kinds}");
    }
}
