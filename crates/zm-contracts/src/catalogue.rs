//! The tool catalogue: for each of the 18 tools its name, title,
//! description, annotations and schemas. Written once; the MCP and HTTP
//! layers only read it.

use serde::Serialize;
use serde_json::Value;

use crate::io::*;
use crate::validate::{output_schema_of, schema_of};

/// The four MCP tool-annotation hints, all explicit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Annotations {
    pub read_only_hint: bool,
    pub destructive_hint: bool,
    pub idempotent_hint: bool,
    pub open_world_hint: bool,
}

/// Read tools: change nothing, repeatable.
pub const READ: Annotations = Annotations {
    read_only_hint: true,
    destructive_hint: false,
    idempotent_hint: true,
    open_world_hint: false,
};
/// Additive writes that a repeat leaves as one call did.
pub const WRITE_IDEMPOTENT: Annotations = Annotations {
    read_only_hint: false,
    destructive_hint: false,
    idempotent_hint: true,
    open_world_hint: false,
};
/// Additive writes whose repeat is not a no-op.
pub const WRITE: Annotations = Annotations {
    read_only_hint: false,
    destructive_hint: false,
    idempotent_hint: false,
    open_world_hint: false,
};
/// Writes that invalidate or erase what existed; a repeat changes nothing more.
pub const DESTRUCTIVE_IDEMPOTENT: Annotations = Annotations {
    read_only_hint: false,
    destructive_hint: true,
    idempotent_hint: true,
    open_world_hint: false,
};

/// What a tool needs from the caller's token: declared per tool, next to
/// (and checked against, never derived from) its annotation hints. `Read`
/// tools change no row; `Write` tools need the `mcp:write` scope; `Erase`
/// (erasing the caller's whole account) also needs `account:delete`, which
/// no token gets by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    Read,
    Write,
    Erase,
}

/// A tool's typed contract: its name and its input and output types.
pub trait ToolContract {
    const NAME: &'static str;
    /// The catalogue position (the [`ToolName`] of the tool).
    const TOOL: ToolName;
    type Input: serde::de::DeserializeOwned
        + Serialize
        + schemars::JsonSchema
        + garde::Validate<Context = ()>
        + 'static;
    type Output: serde::de::DeserializeOwned + Serialize + schemars::JsonSchema + 'static;
}

/// One catalogue entry.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub annotations: Annotations,
    /// What the tool needs from the caller's token.
    pub access: Access,
    /// The input JSON Schema.
    pub input_schema: fn() -> Value,
    /// The output JSON Schema.
    pub output_schema: fn() -> Value,
    /// Name of the input type (the OpenAPI component name).
    pub input_type: &'static str,
    /// Name of the output type (the OpenAPI component name).
    pub output_type: &'static str,
}

macro_rules! tools {
    ($d:tt $( $marker:ident $name:literal ($input:ident -> $output:ident) $access:ident $ann:ident, $title:literal, $desc:expr; )*) => {
        /// Marker types implementing [`ToolContract`], one per tool.
        pub mod tool {
            use super::*;
            $(
                #[doc = concat!("The `", $name, "` tool.")]
                #[derive(Debug, Clone, Copy)]
                pub struct $marker;
                impl ToolContract for $marker {
                    const NAME: &'static str = $name;
                    const TOOL: ToolName = ToolName::$marker;
                    type Input = $input;
                    type Output = $output;
                }
            )*
        }

        /// The tools, in catalogue (and `tools/list`) order.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ToolName { $($marker,)* }

        impl ToolName {
            pub const ALL: &'static [ToolName] = &[$(ToolName::$marker,)*];
            pub const fn as_str(self) -> &'static str {
                match self { $(ToolName::$marker => $name,)* }
            }
            pub fn parse(s: &str) -> Option<ToolName> {
                match s { $($name => Some(ToolName::$marker),)* _ => None }
            }
            /// The catalogue entry.
            pub fn spec(self) -> &'static ToolSpec {
                &CATALOGUE[self as usize]
            }
            /// What the tool needs from the caller's token.
            pub fn access(self) -> Access {
                self.spec().access
            }
        }

        /// The catalogue, in `tools/list` order.
        pub static CATALOGUE: &[ToolSpec] = &[$(
            ToolSpec {
                name: $name,
                title: $title,
                description: $desc,
                annotations: $ann,
                access: Access::$access,
                input_schema: schema_of::<$input>,
                output_schema: output_schema_of::<$output>,
                input_type: stringify!($input),
                output_type: stringify!($output),
            },
        )*];

        /// The typed output of any tool: what the tool service returns and
        /// the transports encode. Serialises as the tool's output shape.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        #[serde(untagged)]
        pub enum ToolOutput { $( $marker($output), )* }

        impl ToolOutput {
            /// The tool that produced this output.
            pub fn tool(&self) -> ToolName {
                match self { $(ToolOutput::$marker(_) => ToolName::$marker,)* }
            }
        }

        /// Calls `$callback! { Remember Recall … }` with the marker of every
        /// tool, in catalogue order: how other crates generate code per tool
        /// (the tool service's dispatch) from this one list.
        #[macro_export]
        macro_rules! for_each_tool {
            ($d callback:ident) => { $d callback! { $($marker)* } };
        }
    };
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The block every write-tool description ends with.
macro_rules! memory_policy {
    () => {
        "\n\nMEMORY POLICY: store decisions with their why, preferences and working agreements, gotchas when you discover them, and conventions nothing enforces. Do not store what the code already says, secrets, trivia or transcripts. One atomic, self-contained fact per memory, written when you learn it."
    };
}

tools! {
    $
    Remember "remember" (RememberInput -> RememberOutput) Write WRITE_IDEMPOTENT, "Remember a fact",
    concat!(
        "Store ONE durable memory so later conversations can recall it: a fact, decision, convention, preference, gotcha, reference, episode, or an open loop (kind task / open-question).\n\n",
        "Where it goes: pass `scope` (\"core\" for portable facts about the user's world, \"personal\" for preferences, or a scope path), else `project_hint` (repo root path, git remote URL or project name), else the `thread` token from an earlier result, else the session's attached project. With none of these the write is REFUSED with a message starting `scope_target_required:`; a hint with no usable name in it is refused with `project_hint_unresolvable:`, and a name you have no project for creates yours. A `core`/`personal` write about how THIS project works is stored in the project and `routed_to_project` says so.\n\n",
        "Secrets (API keys, tokens, private keys, passwords in URLs) are refused with `secret_content_rejected:` — rephrase without them. An identical memory of the same kind in the same scope absorbs the write (`deduplicated: true`). `similar_existing` lists near-duplicates: if the new memory replaces one, remember again with `links: [{dst, type: \"supersedes\"}]` (superseding an open loop closes it). Name the subjects in `entities` so the graph can connect them. Echo `session.thread` as `thread` on your next call. `content` and `verbatim` each hold at most 65,536 characters unless the operator set another limit.\n\nErrors: `forbidden` when the scope is another user's or a team's you are not in, or your role where it would go is reader, a `links` target is a memory you read where your role is reader (a link shows to everyone who reads it), or your storage quota is used up; `not_found` when a `links` target does not exist or you cannot read it.",
        memory_policy!()
    );
    Recall "recall" (RecallInput -> RecallOutput) Read READ, "Recall memories",
    "Search stored memories by meaning of the words (full-text, ranked by relevance and freshness; memories holding every word of the query rank first, with a `score` of at least 0.5). Use it before answering anything that past conversations may have settled: conventions, decisions, gotchas, where things live, what the user prefers.\n\nBy default it reads the pinned project (from `project_hint`, the `thread` token, or the session's attached project) plus the user's personal and core memories and their teams' scopes; with nothing pinned it reads everything visible. `scopes` overrides that (`[\"*\"]` = everything visible; `core` and `personal` shorthands work). Filter with `kinds`; `k` sets how many hits (default 10, at most 100); `include_graph` adds each hit's entities.\n\nEach hit has `id`, `content` (an excerpt for long memories: read `zm://memory/{id}` for the whole row), `kind`, `scope`, `score`, and `disputed` / `dispute_id` when it is in a pending conflict — treat disputed memories with care. `related` lists graph neighbours of the hits. Pass `thread` from an earlier result to stay in the same project.";
    BuildContext "build_context" (BuildContextInput -> BuildContextOutput) Read READ, "Build a briefing",
    "Build a context pack for a topic: the most relevant memories, the entities and edges around them, and memories linked through the graph. Call it at the START of a session or task with `briefing: true` and `project_hint` (repo root path or git remote): the briefing adds the user's standing rules (follow them like system rules; pinned first), recent decisions and facts, and open loops (tasks and questions of the last 14 days, oldest first).\n\nThe result's `session.thread` is a token, good for at least 24 hours (each briefing issues a fresh one): echo it as `thread` on later remember/recall calls so they stay attached to this project, even across reconnects. Pass `conversation_id` (your client's conversation id) to bind the thread to this conversation.\n\n`max_tokens` sizes the pack: about one memory per 200 tokens (3 to 24), and the memories and linked memories inlined are cut to share about 4 characters a token of it (each at least 400 characters); rules, recent memories and open loops come on top. `scopes` overrides the default read set (`[\"*\"]` = everything visible). Memories marked `truncated` were cut: read `zm://memory/{id}` for the full text.";
    Forget "forget" (ForgetInput -> ForgetOutput) Write DESTRUCTIVE_IDEMPOTENT, "Forget a memory",
    "Invalidate a memory that is wrong or no longer true. Nothing is deleted: the memory leaves search and briefings, stays in history, and `restore_memory` brings it back. If a newer fact replaces it, prefer `remember` with a `supersedes` link so the history shows what replaced what. To close a finished task or answered question use `close_loop` instead.\n\nErrors: `not_found` when the id does not exist or is not yours (a team's admins may also act on what a departed member left to the team); `forbidden` when it is shared in a project or team where your role is reader (or you have none), or is a departed member's and you are not the team's admin; `conflict` when it is already invalidated.";
    RestoreMemory "restore_memory" (RestoreMemoryInput -> RestoreMemoryOutput) Write WRITE_IDEMPOTENT, "Restore a memory",
    "Undo an invalidation: make a forgotten, closed or superseded memory live again and drop the `supersedes` links that pointed at it. Only the memory's owner can restore it, or a team's admins one a departed member left to the team, if it was forgotten or closed (a superseded one has a newer version).\n\nErrors: `not_found` when the id does not exist or is not yours (a team's admins may also act on what a departed member left to the team); `forbidden` when it is shared in a project or team where your role is reader (or you have none), or is a departed member's and you are not the team's admin; `conflict` when the memory is not invalidated, or when a team's admin restores one a newer version superseded.";
    CloseLoop "close_loop" (CloseLoopInput -> CloseLoopOutput) Write WRITE_IDEMPOTENT, "Close an open loop",
    "Close an open loop — a memory of kind `task` or `open-question` — once the work is done or the question answered. It leaves briefings' open_loops; `restore_memory` reopens it. Store the outcome (the answer, the decision) with `remember` first if it is worth keeping.\n\nErrors: `validation_failed` when the memory is not a task or open-question (use `forget` for those); `not_found` when the id does not exist or is not yours (a team's admins may also act on what a departed member left to the team); `forbidden` when it is shared in a project or team where your role is reader (or you have none), or is a departed member's and you are not the team's admin; `conflict` when it is already closed or invalidated.";
    Share "share" (ShareInput -> ShareOutput) Write WRITE_IDEMPOTENT, "Share a memory",
    "Widen one of your memories into a shared project or team scope (`proj.…` or `team.…`) so its members can read it. The memory moves to that scope and becomes `shared`. Sharing into the scope it is already shared in changes nothing.\n\nErrors: `validation_failed` for a scope that is not a valid project or team path; `forbidden` when you cannot write that scope, or the memory is shared where your role is reader; `not_found` when the memory does not exist or you cannot read it; `conflict` when it is invalidated, or when you can read it but another member wrote it (only its author shares it).";
    MoveMemories "move_memories" (MoveMemoriesInput -> MoveMemoriesOutput) Write WRITE_IDEMPOTENT, "Move memories to a project",
    "Move up to 200 of your memories into one project or team scope, for example memories stored in personal that belong to a project. Give the target as `scope` (a `proj.…`/`team.…` path) or `project_hint` (repo root path, git remote URL or project name). Moved memories become shared with the scope's members.\n\nMemories that cannot move (unknown, not yours, invalidated) are listed in `failed` with the reason while the rest move. Errors for the whole call: `validation_failed` when no target is given or the target is not a project or team scope; `forbidden` when you cannot write it.";
    Link "link" (LinkInput -> LinkOutput) Write WRITE_IDEMPOTENT, "Link two things",
    "Connect two entities or two memories.\n\nEntities: pass two names (e.g. `src: \"web-app\", dst: \"PostgreSQL\", type: \"depends_on\"`) with an edge type: uses, works_on, prefers, part_of, depends_on, decided, replaces, relates_to. Names are looked up, and unknown ones created, in your personal graph; names match ignoring case, spaces, `-` and `_`.\n\nMemories: pass two `mem_…` ids with a memory-link type: relates_to, supersedes, contradicts, derived_from. A `contradicts` link between two of your own memories files a conflict for review (see list_conflicts). To retire an old memory in favour of a new one, use `remember` with a `supersedes` link instead.\n\nRepeating a link changes nothing (`created: false`). A memory link shows in the recall and briefings of everyone who reads both memories.\n\nErrors: `validation_failed` when one side is an id and the other a name, or the type does not fit the endpoints; `not_found` when a memory id does not exist or you cannot read it; `forbidden` when a memory is shared in a project or team where your role is reader.";
    Entities "entities" (EntitiesInput -> EntitiesOutput) Read READ, "List entities",
    "List or search the entities (people, projects, repos, packages, services, tools, libraries, concepts) in the memory graph. `query` matches names (case-insensitive substring); `scope` limits to one scope (`core`, `personal`, `*` or a path); without it every scope you can read is listed, at most 500 entities (narrow with `query` or `scope` to see others). Use the names you find in `remember`'s `entities` and in `link`.";
    Challenge "challenge" (ChallengeInput -> ChallengeOutput) Write WRITE_IDEMPOTENT, "Challenge a memory",
    "Dispute one memory you believe is wrong or outdated, with a `reason` and optional `evidence`. It files a single-subject conflict for review; the memory stays live but recall marks it `disputed`. Challenging a memory that already has a pending challenge returns that one (`already_pending: true`). If you KNOW the replacement, prefer `remember` with a `supersedes` link.\n\nErrors: `not_found` when the memory does not exist or is not yours; `conflict` when it is invalidated; `validation_failed` (prefix `secret_content_rejected:`) when the reason or evidence contains a secret.";
    ListConflicts "list_conflicts" (ListConflictsInput -> ListConflictsOutput) Read READ, "List conflicts",
    "List conflicts between your memories, newest first: challenges, contradictions, and near-duplicate pairs (`unjudged`: you are the judge; close in words when written, or in meaning once embedded). Defaults: status `pending`, limit 20 (at most 100); filter by `verdict`. Each conflict shows both memories; decide with `resolve_conflict`. A pending conflict one of whose memories you have since forgotten, closed or superseded is moot: it is not listed as pending and marks nothing `disputed` (restoring the memory brings it back).\n\nIt pages: when older conflicts remain the result carries `next_cursor`; call again with the same `status` and `verdict` and `cursor` set to it.\n\nErrors: `validation_failed` on `cursor` when it is not a `next_cursor` this server gave you.";
    GetConflict "get_conflict" (GetConflictInput -> GetConflictOutput) Read READ, "Get a conflict",
    "Read one conflict by its `dispute_id` (from list_conflicts or a disputed recall hit): its verdict, status, rationale and the memories involved.\n\nErrors: `not_found` when it does not exist or is not yours.";
    ResolveConflict "resolve_conflict" (ResolveConflictInput -> ResolveConflictOutput) Write DESTRUCTIVE_IDEMPOTENT, "Resolve a conflict",
    "Settle one pending conflict. For a pair of memories: `winner` (one of the two ids) keeps that memory and supersedes the other; `keep_both: true` dismisses the conflict. For a challenged memory: `retire: true` invalidates it; `keep_both: true` (or `winner` = the memory) upholds it. Precedence when several are given: retire, then keep_both, then winner.\n\nErrors: `validation_failed` when none is given, the winner is not in the pair, or retire is used on a pair; `not_found` when the conflict does not exist or involves memories that are not yours; `forbidden` when the memory it would retire, or the winner that would supersede it, is shared in a project or team where your role is reader; `conflict` when it is no longer pending (checked before the chosen action).";
    PromoteRule "promote_rule" (PromoteRuleInput -> PromoteRuleOutput) Write WRITE, "Promote a rule",
    "Turn one of your memories into a standing rule that briefings deliver (and, for user-level rules, the connect-time instructions) for 90 days from its promotion, or for good once pinned (on the dashboard); each layer delivers its 12 newest, and at most 12 pinned ones. Use it when the user says something should ALWAYS or NEVER be done.\n\nThe rule text is `rule_text` (an imperative sentence, at most 2000 characters) or else the memory's content, which must then fit in 2000 characters too. The layer: with `applies_scope` (a project scope) the rule reaches that project's briefings; without it, a memory in a personal scope gives a user-level rule for all sessions and a memory in a project gives a project rule. A rule that was revoked (its memory forgotten, closed or superseded) or dismissed needs `force: true` to promote again.\n\nErrors: `validation_failed` when `applies_scope` is not a project or team scope (`proj.…`, `team.…`), or `rule_text` is omitted and the memory is longer than 2000 characters; `not_found` when the memory does not exist or is not yours, or `applies_scope` is a scope you have no role in; `forbidden` when the rule would apply to a project or team scope where your role is reader; `conflict` when it is invalidated or the rule was revoked or dismissed and `force` is not set.";
    ImportMemory "import_memory" (ImportMemoryInput -> ImportMemoryOutput) Write WRITE_IDEMPOTENT, "Import a memory",
    concat!(
        "Import one memory from another tool's notes (CLAUDE.md, .cursorrules, an exported memory file) deterministically. `target` is `personal`, `core`, or `project` (then `project_hint` is required). `source_path` and `source_hash` (e.g. the sha256 of the content) record where it came from; the same `source_hash` imported again is skipped (`skipped: true`), so re-running an import is safe. With `target: project`, a hint that names no project imports into `personal`. `content` and `verbatim` each hold at most 65,536 characters unless the operator set another limit. Secrets are refused with `secret_content_rejected:`.\n\nErrors: `validation_failed` when `project_hint` is missing for `project`, `source_hash` is blank, a field is too long, or the text holds a secret; `forbidden` when the hint names a project or team scope where your role is reader, or your storage quota is used up.",
        memory_policy!()
    );
    ExportMemories "export_memories" (ExportMemoriesInput -> ExportMemoriesOutput) Read READ, "Export memories",
    "Export every memory you can read — live and invalidated, with provenance — as full rows, oldest first. `scopes` limits the export (`core`, `personal`, `*` or paths). Use it for backups and for moving memories elsewhere.\n\nIt pages: one call returns at most `limit` memories (default 500, at most 1000), and ends a page early after the memory whose text (content and provenance) brings the page past 8,388,608 characters. When more remain the result carries `next_cursor`: call again with the same `scopes` and `cursor` set to it, until a result has no `next_cursor`. `count` is the number of memories in this page.\n\nErrors: `validation_failed` on `cursor` when it is not a `next_cursor` this server gave you.";
    DeleteAccount "delete_account" (DeleteAccountInput -> DeleteAccountOutput) Erase DESTRUCTIVE_IDEMPOTENT, "Delete my account",
    "Erase the calling user's account and everything it owns: memories, entities, edges, links, conflicts, rules, threads, tokens. Links other users hold to your memories are severed; their own data is untouched. This cannot be undone: only call it when the user explicitly asks to delete their account. Returns what was erased.\n\nErrors: `forbidden` when the token lacks the `account:delete` scope (a personal token made with `zero-memory token create --allow-account-delete` has it); `conflict` when you are the last admin of a team (make another member admin, or delete the team, first).";
}

/// A resource the server exposes.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ResourceSpec {
    pub uri: &'static str,
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub mime_type: &'static str,
    /// True for an RFC 6570 template.
    pub template: bool,
}

/// The resources: one memory (template) and the caller's rules.
pub static RESOURCES: &[ResourceSpec] = &[
    ResourceSpec {
        uri: crate::uri::MEMORY_TEMPLATE,
        name: "memory",
        title: "One memory, full fidelity",
        description: "The full, untruncated row of one memory you can read, as JSON.",
        mime_type: "application/json",
        template: true,
    },
    ResourceSpec {
        uri: crate::uri::RULES_URI,
        name: "rules",
        title: "Your standing rules",
        description: "Your standing rules, pinned first, as {\"rules\": [{text, pinned}]}: the ones you promoted, your teams' (promoted for a team you belong to), and the attached project's.",
        mime_type: "application/json",
        template: false,
    },
];

/// An argument of a prompt.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PromptArgSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub required: bool,
}

/// A prompt the server exposes.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PromptSpec {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub arguments: &'static [PromptArgSpec],
}

/// The prompts.
pub static PROMPTS: &[PromptSpec] = &[PromptSpec {
    name: "brief",
    title: "Brief me",
    description: "Load the briefing for the current project (rules, open loops, the most relevant memories) before starting work.",
    arguments: &[PromptArgSpec {
        name: "topic",
        description: "What the session is about; defaults to the current project and its active work.",
        required: false,
    }],
}];

/// The description budget, in bytes of UTF-8.
pub const DESCRIPTION_BUDGET: usize = 2048;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_matches_tool_names() {
        assert_eq!(CATALOGUE.len(), 18);
        for (i, name) in ToolName::ALL.iter().enumerate() {
            assert_eq!(CATALOGUE[i].name, name.as_str());
            assert_eq!(ToolName::parse(name.as_str()), Some(*name));
            assert_eq!(name.spec().name, name.as_str());
        }
    }

    #[test]
    fn access_agrees_with_the_read_only_hint() {
        for spec in CATALOGUE {
            assert_eq!(
                spec.access == Access::Read,
                spec.annotations.read_only_hint,
                "{}: access {:?} vs readOnlyHint {}",
                spec.name,
                spec.access,
                spec.annotations.read_only_hint
            );
        }
    }

    #[test]
    fn outputs_know_their_tool() {
        let out = ToolOutput::Forget(ForgetOutput {
            memory_id: crate::MemoryId::from_trusted("mem_0000000000000000.0000000000"),
            invalidated: true,
        });
        assert_eq!(out.tool(), ToolName::Forget);
        assert_eq!(tool::Forget::TOOL, ToolName::Forget);
    }

    #[test]
    fn schemas_are_objects() {
        for spec in CATALOGUE {
            let i = (spec.input_schema)();
            let o = (spec.output_schema)();
            assert_eq!(i["type"], "object", "{} input", spec.name);
            assert_eq!(o["type"], "object", "{} output", spec.name);
            assert_eq!(i["additionalProperties"], false, "{} input", spec.name);
        }
    }
}
