//! Shapes shared by several tools: memories, hits, entities, edges,
//! conflicts, rules, session state.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::enums::{
    AuthorKind, ConflictStatus, ConflictVerdict, EdgeType, EntityType, MemoryKind, MemoryLinkType,
    Visibility,
};
use crate::ids::{EntityId, MemoryId};

/// The session attachment state (the 2.1.0 minor).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionState {
    /// The project scope scope-less writes land in, or null when none is attached.
    pub attached_project: Option<String>,
    /// The thread token to echo back as `thread` on later calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
}

/// One memory, full fidelity: what `zm://memory/{id}` returns and what
/// `export_memories` lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Memory {
    pub id: MemoryId,
    /// The content as stored (never truncated here).
    pub content: String,
    /// Pre-translation source text. Always null: content is stored as written.
    pub content_original: Option<String>,
    /// Detected source language, when known.
    pub content_lang: Option<String>,
    pub kind: MemoryKind,
    pub scope: String,
    pub visibility: Visibility,
    pub author_kind: AuthorKind,
    /// The writing agent's client name, when known.
    pub agent_name: Option<String>,
    /// Server-stamped provenance (routing, thread, verbatim, import source).
    pub source: Option<Value>,
    /// The memory that replaced this one.
    pub superseded_by: Option<MemoryId>,
    /// When this memory stopped being live (RFC 3339), or null while live.
    pub invalidated_at: Option<String>,
    /// RFC 3339 creation time.
    pub created_at: String,
}

/// An exported memory: the [`Memory`] shape.
pub type ExportedMemory = Memory;

/// A near-duplicate found when remembering: a candidate to supersede.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SimilarMemory {
    pub id: MemoryId,
    pub kind: MemoryKind,
    /// Whole days since the candidate was written.
    pub age_days: u32,
    /// Lexical cosine similarity, 0..1.
    pub similarity: f64,
    /// The first 200 characters of the candidate.
    pub content: String,
}

/// An entity as attached to a hit or a briefing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContextEntity {
    pub id: EntityId,
    pub name: String,
    #[serde(rename = "type")]
    pub entity_type: EntityType,
    /// Every type this name carries, when collapsed across types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub types: Option<Vec<EntityType>>,
    /// How many memories mention it, when counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub count: Option<u32>,
}

/// One recall hit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchHit {
    pub id: MemoryId,
    /// The content, or an excerpt of a long memory around the match.
    pub content: String,
    pub kind: MemoryKind,
    pub scope: String,
    /// The team (its slug) you read this memory through: its scope is the
    /// team's, one of the team's projects or a project shared with it.
    /// Absent for your own and directly shared scopes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    pub visibility: Visibility,
    pub created_at: String,
    /// Opaque ordering scalar: higher ranks first.
    pub score: f64,
    /// True when the memory is in a pending conflict.
    pub disputed: bool,
    pub dispute_id: Option<String>,
    /// The other memory of the pending conflict, when it is a pair.
    pub dispute_with: Option<String>,
    /// Cosine similarity of the query's and the memory's embeddings, in
    /// hybrid recall; null in lexical mode and for a memory not embedded
    /// yet.
    pub similarity: Option<f64>,
    /// True when the full-text leg matched.
    pub fts_matched: bool,
    /// Days past the freshness budget for core facts/references, else null.
    pub stale_days: Option<u32>,
    /// Entities attached to the memory (with `include_graph`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entities: Option<Vec<ContextEntity>>,
}

/// A graph neighbour of a hit, surfaced without its full content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RelatedStub {
    pub id: MemoryId,
    /// The hit this stub relates to.
    pub of: MemoryId,
    pub relation: MemoryLinkType,
    pub kind: MemoryKind,
    /// The first characters of the neighbour.
    pub preview: String,
}

/// A memory inside a briefing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContextMemory {
    pub id: MemoryId,
    pub content: String,
    pub kind: MemoryKind,
    pub scope: String,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// True when `content` was cut; read `zm://memory/{id}` for the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
}

/// An edge between two entities, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContextEdge {
    pub src: String,
    pub dst: String,
    #[serde(rename = "type")]
    pub edge_type: EdgeType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
}

/// An entity as listed by `entities`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Entity {
    pub id: EntityId,
    pub name: String,
    #[serde(rename = "type")]
    pub entity_type: EntityType,
    pub scope: String,
    pub created_at: String,
}

/// A standing rule as delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Rule {
    pub text: String,
    pub pinned: bool,
}

/// The caller's standing rules, pinned first: what `zm://rules` and
/// `GET /api/rules` return.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RuleList {
    pub rules: Vec<Rule>,
}

/// One side of a conflict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConflictSide {
    pub id: MemoryId,
    pub kind: MemoryKind,
    pub scope: String,
    pub created_at: String,
    pub content: String,
}

/// A conflict (review-queue row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Conflict {
    /// The conflict id (`mrq_…`).
    pub dispute_id: String,
    pub status: ConflictStatus,
    pub verdict: ConflictVerdict,
    pub confidence: Option<f64>,
    pub rationale: Option<String>,
    pub created_at: String,
    pub memory_a: ConflictSide,
    /// The second memory, or null for a single-subject challenge.
    pub memory_b: Option<ConflictSide>,
}
