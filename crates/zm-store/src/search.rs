//! Retrieval: `recall` and `build_context`.

use std::collections::{HashMap, HashSet};

use sqlx::any::AnyRow;
use zm_contracts::scope;
use zm_contracts::{
    BuildContextInput, BuildContextOutput, ConflictVerdict, ContextEdge, ContextEntity,
    ContextMemory, EntityId, EntityType, Memory, MemoryId, MemoryKind, MemoryLinkType, RecallInput,
    RecallOutput, RelatedStub, Rule, RuleLayer, SearchHit, SessionState, ToolError, Visibility,
};

use crate::clock::{DAY_MS, rfc3339};
use crate::db::{Backend, DbResult};
use crate::fts;
use crate::rows::{FromAnyRow, col, enum_col, id_col, json_col, opt_id_col};
use crate::scopes::{
    ReadSet, Visible, explicit_read_set, pinned_read_set, push_read_set, push_read_set_filter,
    push_visible,
};
use crate::semantic::Reader;
use crate::sql::Sql;
use crate::store::{Caller, Store};

/// Columns of a full memory row (alias `m`).
pub(crate) const MEMORY_COLUMNS: &str = "m.id, m.owner_id, m.content, m.kind, m.scope, m.visibility, m.author_kind, m.agent_name, m.source, m.superseded_by, m.invalidated_at, m.created_at";

/// Related stubs a recall lists, in all and per hit.
pub const RELATED_CAP: usize = 8;
pub const RELATED_PER_HIT: usize = 2;
/// Characters of a related stub's preview.
pub const RELATED_PREVIEW_CHARS: usize = 160;
/// Inline cap of a briefing memory.
pub const INLINE_CHARS: usize = 2400;
/// Inline cap of an open loop's headline.
pub const LOOP_HEADLINE_CHARS: usize = 400;
/// Open loops older than this leave the briefing (they stay live).
pub const OPEN_LOOP_TTL_DAYS: i64 = 14;
/// How many open loops a briefing lists.
pub const OPEN_LOOPS_CAP: usize = 10;
/// How far back `recent` looks, and how many it lists.
pub const RECENT_DAYS: i64 = 14;
pub const RECENT_CAP: usize = 5;
/// The least a briefing memory inlines under a small `max_tokens`.
pub const BUDGET_MIN_INLINE_CHARS: usize = 400;
/// Rules delivered per layer (unpinned), and for how long after promotion.
pub const RULES_CAP_PER_LAYER: usize = 12;
/// Pinned rules delivered per layer (the newest promotions), on top of the
/// unpinned ones; pinning one more in a layer that holds as many is
/// refused. A team's writers pin for every member: without a cap their
/// briefings had no bound.
pub const PINNED_RULES_CAP_PER_LAYER: usize = 12;
pub const RULES_TTL_DAYS: i64 = 90;

/// Half-life of a kind's relevance, in days.
pub fn half_life_days(kind: MemoryKind) -> f64 {
    match kind {
        MemoryKind::Episode => 30.0,
        MemoryKind::Task | MemoryKind::OpenQuestion => 14.0,
        MemoryKind::Fact => 365.0,
        MemoryKind::Gotcha => 1095.0,
        MemoryKind::Preference | MemoryKind::Reference => 1825.0,
        MemoryKind::Decision | MemoryKind::Convention => 3650.0,
    }
}

/// The decay multiplier of a memory of `kind` that is `age_ms` old.
pub fn decay(kind: MemoryKind, age_ms: i64) -> f64 {
    let days = age_ms.max(0) as f64 / DAY_MS as f64;
    0.5f64.powf(days / half_life_days(kind))
}

/// The columns of a [`Candidate`] (memories aliased `m`) whose content is
/// only ever shown cut to a headline: the content is read as its first
/// `INLINE_CHARS + 1` characters, so a briefing or a neighbour list never
/// holds whole rows (a memory may hold `max_text_chars`, 64 Ki by default).
pub(crate) const CANDIDATE_COLUMNS: &str =
    "m.id, m.scope, m.kind, substr(m.content, 1, 2401) AS content, m.visibility, m.created_at";

// Every headline cut from a preview is at most INLINE_CHARS long, and the
// preview reads one character more, so the headline knows it was cut
// (checked against the column list in the tests).
const _: () = assert!(INLINE_CHARS >= LOOP_HEADLINE_CHARS && INLINE_CHARS >= RELATED_PREVIEW_CHARS);

/// The columns of a [`Candidate`] with its whole content (the
/// near-duplicate probe compares whole texts, over a few candidates).
pub(crate) const FULL_CANDIDATE_COLUMNS: &str =
    "m.id, m.scope, m.kind, m.content, m.visibility, m.created_at";

/// How much of a hit's content recall reads to cut its excerpt from.
const HIT_READ_CHARS: usize = 200_000;

/// The columns ranking reads: no content at all. Up to 400 candidates are
/// ranked; only the hits kept get their content, in a second query.
const RANK_COLUMNS: &str = "m.id, m.scope, m.kind, m.visibility, m.created_at";

/// A full-text candidate as ranking sees it ([`RANK_COLUMNS`] and `rel`).
struct Ranking {
    id: MemoryId,
    scope: String,
    kind: MemoryKind,
    visibility: Visibility,
    created_at: i64,
    rel: f64,
}

impl FromAnyRow for Ranking {
    fn from_row(r: &AnyRow) -> Result<Ranking, ToolError> {
        Ok(Ranking {
            id: id_col(r, "id")?,
            scope: col(r, "scope")?,
            kind: enum_col(r, "kind")?,
            visibility: enum_col(r, "visibility")?,
            created_at: col(r, "created_at")?,
            rel: col(r, "rel")?,
        })
    }
}

impl Ranking {
    fn with_content(self, content: String) -> Candidate {
        Candidate {
            id: self.id,
            scope: self.scope,
            kind: self.kind,
            content,
            visibility: self.visibility,
            created_at: self.created_at,
        }
    }
}

/// A candidate memory: a search hit, a neighbour, a briefing row.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub id: MemoryId,
    pub scope: String,
    pub kind: MemoryKind,
    pub content: String,
    pub visibility: Visibility,
    pub created_at: i64,
}

impl FromAnyRow for Candidate {
    fn from_row(r: &AnyRow) -> Result<Candidate, ToolError> {
        Ok(Candidate {
            id: id_col(r, "id")?,
            scope: col(r, "scope")?,
            kind: enum_col(r, "kind")?,
            content: col(r, "content")?,
            visibility: enum_col(r, "visibility")?,
            created_at: col(r, "created_at")?,
        })
    }
}

impl Candidate {
    /// This candidate as a briefing memory, its content already cut to
    /// `(content, truncated)`.
    fn context(&self, (content, cut): (String, bool), score: Option<f64>) -> ContextMemory {
        ContextMemory {
            id: self.id.clone(),
            content,
            kind: self.kind,
            scope: self.scope.clone(),
            created_at: rfc3339(self.created_at),
            score,
            truncated: cut.then_some(true),
        }
    }
}

/// The start of a full-text query selecting `columns` of memories `m`
/// holding all or any of the text's words, and the relevance `rel`; `None`
/// when the text holds no searchable word. On SQLite `tenants` (from
/// [`Visible::fts_tenants`]) narrows the match to the memories of those
/// owner and scope tokens inside the index; the caller still filters by
/// visibility.
pub(crate) fn fts_select(
    backend: Backend,
    text: &str,
    mode: fts::Match,
    columns: &str,
    tenants: Option<&str>,
) -> Option<Sql> {
    match backend {
        Backend::Sqlite => {
            let words = fts::sqlite_match(text, mode)?;
            let q = match tenants {
                Some(t) => format!("{FTS_WORDS} : ({words}) AND {t}"),
                None => format!("{FTS_WORDS} : ({words})"),
            };
            // CROSS JOIN pins the join order: the full-text match drives and
            // each hit is fetched by rowid. Left to itself the planner may
            // drive from an index on `memories` (owner, scope) and re-run
            // the MATCH once per row: quadratic in the number of memories.
            // Ranking reads only what the covering index `memories_rank`
            // holds (migration 0007): name it, or the planner reads rows.
            let index = if columns == RANK_COLUMNS {
                " INDEXED BY memories_rank"
            } else {
                ""
            };
            // The tenant column's tokens weigh nothing in the relevance.
            let mut sql = Sql::new(&format!(
                "SELECT {columns}, -bm25(memories_fts, 1.0, 0.0) AS rel FROM memories_fts CROSS JOIN memories m{index} ON m.seq = memories_fts.rowid WHERE memories_fts MATCH "
            ));
            sql.bind_str(q);
            Some(sql)
        }
        Backend::Postgres => {
            let q = fts::pg_query(text, mode)?;
            let mut sql = Sql::new(&format!(
                "SELECT {columns}, CAST(ts_rank_cd(m.fts, q) AS DOUBLE PRECISION) * 10.0 AS rel FROM memories m, to_tsquery('english', "
            ));
            sql.bind_str(q).push(") q WHERE m.fts @@ q");
            Some(sql)
        }
    }
}

/// The column of SQLite's full-text index that holds the words (the other,
/// `fts_tenant`, holds owner and scope tokens: migration 19).
const FTS_WORDS: &str = "content";

/// A SQLite `MATCH` for one query term, in the words' column only.
fn fts_word(term: &str) -> String {
    format!("{FTS_WORDS} : \"{term}\"")
}

/// A query selecting `columns` of memories `m` that hold at least
/// `at_least` of `terms`, with `hits` (how many they hold): each term's
/// postings are listed (no scoring) and counted per memory, so the work is
/// the sum of the terms' frequencies — use it with rare terms. The caller
/// adds conditions on `m` (after `WHERE`) and the order. On PostgreSQL
/// each term's postings are those of `owner`'s live memories only (the
/// full-text index and the owner's index combined): every user's
/// postings of a word would make one user's write cost grow with the
/// whole database (16,000 memories of other users made a test's writes
/// fifteen times slower). SQLite bounds the same work by the words'
/// frequencies instead ([`document_frequencies_sql`]).
pub(crate) fn shared_words_select(
    backend: Backend,
    terms: &[String],
    at_least: usize,
    columns: &str,
    owner: &str,
) -> Option<Sql> {
    if terms.is_empty() {
        return None;
    }
    let mut sql = Sql::new("SELECT ");
    sql.push(columns)
        .push(", g.hits FROM (SELECT r, COUNT(*) AS hits FROM (");
    for (i, t) in terms.iter().enumerate() {
        if i > 0 {
            sql.push(" UNION ALL ");
        }
        match backend {
            Backend::Sqlite => {
                sql.push("SELECT rowid AS r FROM memories_fts WHERE memories_fts MATCH ")
                    .bind_str(fts_word(t));
            }
            Backend::Postgres => {
                sql.push("SELECT seq AS r FROM memories WHERE owner_id = ")
                    .bind_str(owner)
                    .push(" AND invalidated_at IS NULL AND fts @@ to_tsquery('english', ")
                    .bind_str(t.clone())
                    .push(")");
            }
        }
    }
    sql.push(") t GROUP BY r HAVING COUNT(*) >= ")
        .bind_i64(i64::try_from(at_least).unwrap_or(i64::MAX))
        .push(&format!(
            ") g {} memories m ON m.seq = g.r WHERE ",
            driving_join(backend)
        ));
    Some(sql)
}

/// The join keyword that makes the left table drive the join: SQLite never
/// reorders the operands of `CROSS JOIN` (its planner otherwise may scan
/// `memories` by scope and probe the small side once per row: tens of
/// milliseconds at 100k memories); PostgreSQL plans `JOIN` well and has no
/// `CROSS JOIN … ON`.
fn driving_join(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "CROSS JOIN",
        Backend::Postgres => "JOIN",
    }
}

/// The order and size of a full-text candidate list: most relevant first.
/// The engine scores every match before it can keep the best: use it where
/// the matches are few (every word, or several words, of a query).
pub(crate) fn fts_order(sql: &mut Sql, limit: i64) {
    sql.push(" ORDER BY rel DESC, m.seq DESC LIMIT ")
        .bind_i64(limit);
}

/// The order and size of a full-text candidate list where the matches may
/// be many (any one word of a query): the newest first, read in the index's
/// own order and cut at `limit`, so only the rows kept are scored — the
/// work is bounded by `limit`, not by how many memories hold a common word.
pub(crate) fn fts_newest(backend: Backend, sql: &mut Sql, limit: i64) {
    sql.push(match backend {
        Backend::Sqlite => " ORDER BY memories_fts.rowid DESC LIMIT ",
        Backend::Postgres => " ORDER BY m.seq DESC LIMIT ",
    })
    .bind_i64(limit);
}

/// How many memories one full-text leg may score by relevance: past it,
/// a leg reads the newest matches instead ([`fts_newest`]). Scoring is
/// linear in the matches (bm25 and `ts_rank_cd` score every one before
/// the best can be kept), so an unbounded leg over a word most memories
/// hold — `the`, a product's own name — would grow with the store.
pub const RELEVANCE_BUDGET: i64 = 2000;

/// Reciprocal rank fusion's constant: a hit at rank r (from 1) of a leg
/// adds `1 / (RRF_K + r)`.
pub const RRF_K: f64 = 60.0;
/// The weight in the fusion of a full-text hit holding only some of the
/// query's words, times the share of the words it holds to the power
/// [`COVERAGE_EXPONENT`] (a hit holding every word weighs 1). Tuned on the
/// development sets.
pub const PARTIAL_WEIGHT: f64 = 1.0;
/// A full-text hit holding one word of a four-word query weighs
/// [`PARTIAL_WEIGHT`] × (1/4)^this: on a paraphrase such a hit is noise,
/// on a keyword or conversational question one holding most words is the
/// answer. Words held by more than [`RELEVANCE_BUDGET`] memories are not
/// counted (they cost as much as scoring them); a word no memory holds
/// is, so a word missing from the index counts as it would anywhere. On
/// SQLite those counts are over the whole index, every user's memories
/// included (as its bm25 statistics are: docs/SECURITY.md), so another
/// user's many memories holding a word can take it out of the share and
/// order the every-word leg by recency; PostgreSQL counts nothing across
/// users (every word is taken as within the budget). A hit holding only
/// words too common to count is taken to hold half of one.
/// Tuned on the development sets (twelfth session).
pub const COVERAGE_EXPONENT: f64 = 2.0;
/// The weight of a dense hit. Tuned on the development sets.
pub const DENSE_WEIGHT: f64 = 1.5;
/// How far below the nearest memory's cosine a dense hit may be.
/// Tuned on the development sets.
pub const DENSE_SPREAD: f64 = 0.25;
/// How many hits of each leg are fused (the full-text leg's first `k`
/// when a recall asks for more: hybrid recall returns as many hits as
/// lexical recall would, whether or not they have vectors yet).
pub const FUSION_DEPTH: usize = 50;
/// How many nearest vectors the index proposes before the SQL visibility
/// check keeps the first [`FUSION_DEPTH`] the caller reads.
pub const DENSE_PREFILTER: usize = 200;
/// The least cosine a dense hit needs: below it a memory is not proposed
/// by meaning (it may still be a full-text hit). Tuned on the development
/// paraphrase set (`bench/quality/paraphrase-dev.jsonl`), never on the
/// held-out one.
pub const DENSE_FLOOR: f64 = 0.20;

/// The constants of hybrid fusion in one value. Recall uses
/// [`Fusion::DEFAULT`] (the constants above); the quality benchmark's
/// sweep (`cargo xtask quality --dev --sweep`) sets others on its own
/// store to choose them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fusion {
    /// [`RRF_K`].
    pub rrf_k: f64,
    /// [`PARTIAL_WEIGHT`].
    pub partial_weight: f64,
    /// [`COVERAGE_EXPONENT`].
    pub coverage_exponent: f64,
    /// [`DENSE_WEIGHT`] (a full-text hit holding every word weighs 1).
    pub dense_weight: f64,
    /// [`DENSE_SPREAD`].
    pub dense_spread: f64,
    /// [`DENSE_FLOOR`].
    pub dense_floor: f64,
}

impl Fusion {
    /// What recall uses.
    pub const DEFAULT: Fusion = Fusion {
        rrf_k: RRF_K,
        partial_weight: PARTIAL_WEIGHT,
        coverage_exponent: COVERAGE_EXPONENT,
        dense_weight: DENSE_WEIGHT,
        dense_spread: DENSE_SPREAD,
        dense_floor: DENSE_FLOOR,
    };

    /// The weight of a full-text hit holding `share` of the query's
    /// (counted) words, in [0, 1]; 1 for a hit holding every word.
    pub fn lexical_weight(&self, every_word: bool, share: f64) -> f64 {
        if every_word {
            1.0
        } else {
            self.partial_weight * share.clamp(0.0, 1.0).powf(self.coverage_exponent)
        }
    }
}

impl Default for Fusion {
    fn default() -> Fusion {
        Fusion::DEFAULT
    }
}

/// The order of a full-text leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LegOrder {
    /// Most relevant first: every match is scored.
    Relevance,
    /// Newest first: only the kept matches are scored.
    Newest,
}

/// One full-text query of a recall.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Leg {
    pub text: String,
    pub mode: fts::Match,
    pub order: LegOrder,
    /// Holds only some of the query words (run only while the legs before
    /// it found fewer than the limit).
    pub partial: bool,
}

/// The legs of a recall, from the document frequency of each query term.
///
/// 1. **Every word**: ranked by relevance when the rarest word is held by
///    at most [`RELEVANCE_BUDGET`] memories (the matches are at most that
///    many), else the newest matches.
/// 2. **Any of the rare words** (ranked by relevance): the terms taken from
///    the rarest up while their frequencies sum to at most the budget. The
///    common words add almost nothing to a relevance score (their idf is
///    near zero), so leaving them out of this leg changes little but cost.
/// 3. **Any word, newest first**: only when some words were left out of
///    leg 2 — memories that hold nothing but common words.
///
/// On a store where every word is rarer than the budget this is exactly
/// "every word, then any word, by relevance".
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LegPlan {
    pub legs: Vec<Leg>,
}

impl LegPlan {
    pub(crate) fn new(terms: &[String], df: &[i64]) -> LegPlan {
        let mut legs = Vec::new();
        if terms.is_empty() {
            return LegPlan { legs };
        }
        let all = terms.join(" ");
        let rarest = df.iter().copied().min().unwrap_or(0);
        legs.push(Leg {
            text: all.clone(),
            mode: fts::Match::All,
            order: if rarest <= RELEVANCE_BUDGET {
                LegOrder::Relevance
            } else {
                LegOrder::Newest
            },
            partial: false,
        });
        if terms.len() == 1 {
            return LegPlan { legs };
        }
        let mut by_df: Vec<(i64, &str)> = df
            .iter()
            .copied()
            .zip(terms.iter().map(String::as_str))
            .collect();
        by_df.sort_by_key(|(d, _)| *d);
        let mut sum = 0i64;
        let mut rare: Vec<&str> = Vec::new();
        // A word no memory holds (or a stop word, on PostgreSQL) adds nothing.
        for (d, t) in by_df.into_iter().filter(|(d, _)| *d > 0) {
            sum = sum.saturating_add(d);
            if sum > RELEVANCE_BUDGET {
                break;
            }
            rare.push(t);
        }
        if !rare.is_empty() {
            // In the query's own order.
            let rare_text = terms
                .iter()
                .filter(|t| rare.contains(&t.as_str()))
                .cloned()
                .collect::<Vec<_>>()
                .join(" ");
            legs.push(Leg {
                text: rare_text,
                mode: fts::Match::Any,
                order: LegOrder::Relevance,
                partial: true,
            });
        }
        if rare.len() < df.iter().filter(|&&d| d > 0).count() {
            legs.push(Leg {
                text: all,
                mode: fts::Match::Any,
                order: LegOrder::Newest,
                partial: true,
            });
        }
        LegPlan { legs }
    }
}

/// How many memories hold each term, in one statement; each count is cut
/// at `budget + 1` (a plan only asks whether a word is within its budget,
/// and a capped count reads at most that many postings, however common the
/// word).
///
/// `Known(None)` without terms. On PostgreSQL the frequencies are
/// `Unknown`: the planner answers a capped count with a sequential scan
/// that evaluates the query on every row (≈ 6 ms per word at 10k), which
/// costs more than it saves — every word is then taken as within the
/// budget, which ranks exactly as before the budget existed.
pub(crate) fn document_frequencies_sql(
    backend: Backend,
    terms: &[String],
    budget: i64,
) -> Frequencies {
    if terms.is_empty() {
        return Frequencies::Known(None);
    }
    if backend == Backend::Postgres {
        // A stop word is in no PostgreSQL document (the `english`
        // configuration drops it): it holds none, as a plan must know.
        return Frequencies::Unknown(
            terms
                .iter()
                .map(|t| i64::from(!crate::fts::is_stop_word(t)))
                .collect(),
        );
    }
    let cap = budget + 1;
    let mut sql = Sql::new("SELECT ");
    for (i, t) in terms.iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        sql.push("(SELECT count(*) FROM (SELECT 1 FROM memories_fts WHERE memories_fts MATCH ")
            .bind_str(fts_word(t));
        sql.push(&format!(" LIMIT {cap}) f) AS d{i}"));
    }
    Frequencies::Known(Some(sql))
}

/// What [`document_frequencies_sql`] gives: a statement to run (none
/// without terms), or stand-in frequencies.
pub(crate) enum Frequencies {
    Known(Option<Sql>),
    Unknown(Vec<i64>),
}

/// The counts of a [`document_frequencies_sql`] row.
pub(crate) fn document_frequencies_of(row: &AnyRow, n: usize) -> Result<Vec<i64>, ToolError> {
    (0..n).map(|i| col::<i64>(row, &format!("d{i}"))).collect()
}

/// A full memory row ([`MEMORY_COLUMNS`]).
impl FromAnyRow for Memory {
    fn from_row(r: &AnyRow) -> Result<Memory, ToolError> {
        let source = if col::<Option<String>>(r, "source")?.is_some() {
            Some(json_col(r, "source")?)
        } else {
            None
        };
        Ok(Memory {
            id: id_col(r, "id")?,
            content: col(r, "content")?,
            content_original: None,
            content_lang: None,
            kind: enum_col(r, "kind")?,
            scope: col(r, "scope")?,
            visibility: enum_col(r, "visibility")?,
            author_kind: enum_col(r, "author_kind")?,
            agent_name: col(r, "agent_name")?,
            source,
            superseded_by: opt_id_col(r, "superseded_by")?,
            invalidated_at: col::<Option<i64>>(r, "invalidated_at")?.map(rfc3339),
            created_at: rfc3339(col(r, "created_at")?),
        })
    }
}

/// An entity attached to a memory.
#[derive(Debug)]
struct AttachedEntity {
    memory_id: MemoryId,
    id: EntityId,
    name: String,
    entity_type: EntityType,
}

impl FromAnyRow for AttachedEntity {
    fn from_row(r: &AnyRow) -> Result<AttachedEntity, ToolError> {
        Ok(AttachedEntity {
            memory_id: id_col(r, "memory_id")?,
            id: id_col(r, "id")?,
            name: col(r, "name")?,
            entity_type: enum_col(r, "type")?,
        })
    }
}

/// The rules a briefing delivers (each with its id) and the memories
/// behind them.
#[derive(Debug, Default)]
struct Delivery {
    rules: Vec<(String, Rule)>,
    memories: HashSet<MemoryId>,
}

/// A promoted rule as a briefing delivers it.
#[derive(Debug)]
struct DeliveredRule {
    id: String,
    memory_id: MemoryId,
    owner_id: String,
    text: String,
    layer: RuleLayer,
    applies_scope: Option<String>,
    pinned: bool,
}

impl FromAnyRow for DeliveredRule {
    fn from_row(r: &AnyRow) -> Result<DeliveredRule, ToolError> {
        Ok(DeliveredRule {
            id: col(r, "id")?,
            memory_id: MemoryId::from_trusted(col::<String>(r, "memory_id")?),
            owner_id: col(r, "owner_id")?,
            text: col(r, "text")?,
            layer: enum_col(r, "layer")?,
            applies_scope: col(r, "applies_scope")?,
            pinned: crate::rows::flag_col(r, "pinned")?,
        })
    }
}

/// The highest score of a hit that does not hold every query word: the
/// contract's tier starts at 0.5.
const BELOW_TIER: f64 = 0.499_999;

/// Cut `text` to at most `max` characters around the first word that
/// matches a query term: the same word, or one with the same stem as far
/// as a shared beginning tells (`invoicing` finds `invoices`). A term is
/// never found inside another word (`is` in `this`).
pub fn excerpt(text: &str, query_terms: &[String], max: usize) -> (String, bool) {
    // Walked as characters, never copied whole: a hit may be a long
    // memory, and a recall reads up to a hundred.
    let n = text.chars().count();
    if n <= max {
        return (text.to_string(), false);
    }
    let terms: Vec<Vec<char>> = query_terms
        .iter()
        .map(|t| t.to_lowercase().chars().collect())
        .collect();
    let pos = first_matching_word(text, &terms).unwrap_or(0);
    let start = pos.saturating_sub(max / 4).min(n.saturating_sub(max));
    let end = (start + max).min(n);
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.extend(text.chars().skip(start).take(end - start));
    if end < n {
        out.push('…');
    }
    (out, true)
}

/// Where (in characters) the first word of `text` that matches one of
/// `terms` begins.
fn first_matching_word(text: &str, terms: &[Vec<char>]) -> Option<usize> {
    let mut word: Vec<char> = Vec::new();
    let mut start = 0;
    for (i, c) in text.chars().chain(std::iter::once(' ')).enumerate() {
        if c.is_alphanumeric() {
            if word.is_empty() {
                start = i;
            }
            word.extend(c.to_lowercase());
            continue;
        }
        if !word.is_empty() {
            if terms.iter().any(|t| same_stem(&word, t)) {
                return Some(start);
            }
            word.clear();
        }
    }
    None
}

/// The same word, or two words sharing a beginning of at least four
/// characters that leaves at most three of the shorter one (an ending).
fn same_stem(word: &[char], term: &[char]) -> bool {
    if word == term {
        return true;
    }
    let shared = word.iter().zip(term).take_while(|(a, b)| a == b).count();
    shared >= 4 && shared + 3 >= word.len().min(term.len())
}

fn headline(text: &str, max: usize) -> (String, bool) {
    let n = text.chars().count();
    if n <= max {
        (text.to_string(), false)
    } else {
        let mut s: String = text.chars().take(max).collect();
        s.push('…');
        (s, true)
    }
}

/// Days a core fact/reference is past its freshness budget.
fn stale_days(c: &Candidate, caller: &Caller, now: i64) -> Option<u32> {
    if c.scope != caller.core_scope() {
        return None;
    }
    let budget = match c.kind {
        MemoryKind::Fact => 180,
        MemoryKind::Reference => 90,
        _ => return None,
    };
    let age = (now - c.created_at) / DAY_MS;
    (age > budget).then(|| u32::try_from(age - budget).unwrap_or(u32::MAX))
}

/// A typed-link neighbour of a hit.
#[derive(Debug)]
struct Neighbour {
    /// The hit it is linked to.
    of: MemoryId,
    relation: MemoryLinkType,
    memory: Candidate,
}

/// A candidate being ranked.
struct Hit {
    ranking: Ranking,
    score: f64,
    similarity: Option<f64>,
    fts_matched: bool,
}

impl Hit {
    fn of(ranking: Ranking, score: f64, similarity: Option<f64>, fts_matched: bool) -> Hit {
        Hit {
            ranking,
            score,
            similarity,
            fts_matched,
        }
    }
}

/// A ranked hit with its content.
#[derive(Debug)]
struct ScoredHit {
    memory: Candidate,
    score: f64,
    /// The cosine of the query and the memory, when both have a vector.
    similarity: Option<f64>,
    /// Found by the full-text legs.
    fts_matched: bool,
}

/// Ranked hits and the disputes around them.
#[derive(Debug, Default)]
struct Ranked {
    hits: Vec<ScoredHit>,
    disputes: Disputes,
}

/// Pending conflicts around a set of memories.
#[derive(Debug, Default)]
struct Disputes {
    /// Memories with a pending challenge.
    challenged: HashSet<MemoryId>,
    /// memory id → (newest dispute id, the other memory of a pair).
    by_memory: HashMap<MemoryId, (String, Option<MemoryId>)>,
}

/// The pin and read set of a read.
struct ReadPlan {
    pin: Option<String>,
    /// The session's attached project, if the caller still reaches it.
    attached: Option<String>,
    set: ReadSet,
    thread: Option<crate::threads::Thread>,
    /// The caller's teams' scopes (scope, team slug): part of every
    /// default read set, and what labels a hit with its team.
    teams: Vec<(String, String)>,
}

impl ReadPlan {
    /// The team the caller reads a scope through: none for the caller's
    /// own project, even one they share with a team (they read it as its
    /// owner, as the contract's `team` says).
    fn team_of(&self, caller: &Caller, scope_path: &str) -> Option<String> {
        if scope_path.starts_with(&scope::project_scope(&caller.user_id, "")) {
            return None;
        }
        self.teams
            .iter()
            .find(|(s, _)| s == scope_path)
            .map(|(_, t)| t.clone())
    }
}

/// A default read set plus the caller's teams' scopes.
pub(crate) fn with_teams(mut set: ReadSet, teams: &[(String, String)]) -> ReadSet {
    if let ReadSet::Scopes(v) = &mut set {
        for (s, _) in teams {
            if !v.contains(s) {
                v.push(s.clone());
            }
        }
    }
    set
}

impl Store {
    async fn plan_read(
        &self,
        caller: &Caller,
        scopes: Option<&[zm_contracts::ReadScope]>,
        hint: Option<&str>,
        thread_token: Option<&str>,
        briefing: bool,
    ) -> Result<ReadPlan, ToolError> {
        // A dead pin would read nothing there, and a briefing would issue
        // the same dead thread again.
        let (thread, attached) = self.live_pins(caller, thread_token).await?;
        let attached = attached.map(str::to_string);
        // Pin precedence: hint → live thread → the session's attached project.
        // Explicit `scopes` override a recall's pins (it reads only them,
        // and reports no project it did not read); a briefing still pins
        // the hinted project (its rules and thread) whatever it reads.
        let mut pin = None;
        let pins = scopes.is_none() || briefing;
        if pins && let Some(h) = hint {
            pin = self
                .resolve_hint(caller, h)
                .await?
                .filter(|s| scope::is_shareable(s));
        }
        if pins && pin.is_none() {
            pin = thread
                .as_ref()
                .map(|t| t.scope.clone())
                .filter(|s| scope::is_shareable(s));
        }
        if pins && pin.is_none() {
            pin = attached.clone().filter(|s| scope::is_shareable(s));
        }
        let teams = {
            let mut conn = self.pool.acquire().await.db("acquire")?;
            self.team_scopes_of(&mut conn, &caller.user_id).await?
        };
        let set = match scopes {
            Some(s) => explicit_read_set(caller, s),
            None => match &pin {
                Some(p) => with_teams(pinned_read_set(caller, p), &teams),
                None if briefing => with_teams(
                    ReadSet::Scopes(vec![caller.personal_scope(), caller.core_scope()]),
                    &teams,
                ),
                None => ReadSet::All,
            },
        };
        Ok(ReadPlan {
            pin,
            attached,
            set,
            thread,
            teams,
        })
    }

    /// Full-text candidates within the read set holding all (or any) of
    /// the text's words, the most relevant (or the newest) first.
    #[allow(clippy::too_many_arguments)]
    async fn fts_candidates(
        &self,
        visible: &Visible,
        text: &str,
        mode: fts::Match,
        order: LegOrder,
        set: &ReadSet,
        kinds: Option<&[MemoryKind]>,
        pool: i64,
    ) -> Result<Vec<Ranking>, ToolError> {
        let tenants = visible.fts_tenants();
        let Some(mut sql) = fts_select(self.backend, text, mode, RANK_COLUMNS, tenants.as_deref())
        else {
            return Ok(Vec::new());
        };
        sql.push(" AND m.invalidated_at IS NULL AND ");
        // Listed on PostgreSQL: a common word matches every user's rows,
        // and only the listed form lets the planner intersect the match
        // with the caller's own and shared ones instead of filtering all.
        visible.push(&mut sql, "m");
        sql.push(" AND ");
        push_read_set(&mut sql, "m", set);
        if let Some(kinds) = kinds {
            sql.push(" AND m.kind IN ")
                .bind_list(kinds.iter().map(|k| k.as_str()));
        }
        match order {
            LegOrder::Relevance => fts_order(&mut sql, pool),
            LegOrder::Newest => fts_newest(self.backend, &mut sql, pool),
        }
        let rows = sql
            .query()
            .fetch_all(&self.pool)
            .await
            .db("full-text search")?;
        Ranking::from_rows(&rows)
    }

    /// How many memories hold each term, counted up to
    /// [`RELEVANCE_BUDGET`]` + 1`, in one statement.
    async fn document_frequencies(&self, terms: &[String]) -> Result<Vec<i64>, ToolError> {
        let sql = match document_frequencies_sql(self.backend, terms, RELEVANCE_BUDGET) {
            Frequencies::Known(Some(sql)) => sql,
            Frequencies::Known(None) => return Ok(Vec::new()),
            Frequencies::Unknown(df) => return Ok(df),
        };
        let row = sql
            .query()
            .fetch_one(&self.pool)
            .await
            .db("document frequencies")?;
        document_frequencies_of(&row, terms.len())
    }

    /// The share of `terms` each of `ids` holds, by id. One statement: a
    /// membership test per term and memory, so use it with few memories
    /// and with terms whose postings are short (within the budget).
    async fn coverage(
        &self,
        terms: &[String],
        ids: &[MemoryId],
    ) -> Result<HashMap<MemoryId, f64>, ToolError> {
        if terms.is_empty() || ids.is_empty() {
            return Ok(HashMap::new());
        }
        let mut sql = Sql::new("SELECT m.id, CAST(");
        for (i, t) in terms.iter().enumerate() {
            if i > 0 {
                sql.push(" + ");
            }
            match self.backend {
                Backend::Sqlite => {
                    sql.push("(CASE WHEN m.seq IN (SELECT rowid FROM memories_fts WHERE memories_fts MATCH ")
                        .bind_str(fts_word(t))
                        .push(") THEN 1 ELSE 0 END)");
                }
                Backend::Postgres => {
                    sql.push("(CASE WHEN m.fts @@ to_tsquery('english', ")
                        .bind_str(t.clone())
                        .push(") THEN 1 ELSE 0 END)");
                }
            }
        }
        sql.push(" AS BIGINT) AS hits FROM memories m WHERE m.id IN ")
            .bind_list(ids.iter().map(MemoryId::as_str));
        let rows = sql
            .query()
            .fetch_all(&self.pool)
            .await
            .db("word coverage")?;
        let n = terms.len() as f64;
        rows.iter()
            .map(|r| {
                let hits: i64 = col(r, "hits")?;
                // A partial hit holds some query word: one too common to
                // count is half of one, so no hit weighs 0.
                Ok((id_col(r, "id")?, (hits as f64).max(0.5) / n))
            })
            .collect()
    }

    /// Full-text candidates within the read set, each with whether it
    /// holds every query word, and the query words a partial hit's share
    /// is counted over (those held by at most [`RELEVANCE_BUDGET`]
    /// memories, none included). Memories holding **every** query
    /// word come first (the legs holding only some are run only when the
    /// first kind are fewer than `limit`).
    ///
    /// The work is bounded by the store's vocabulary, not its size (see
    /// [`LegPlan`]): words held by more than [`RELEVANCE_BUDGET`] memories
    /// are not scored across all of them.
    async fn lexical_candidates(
        &self,
        caller: &Caller,
        text: &str,
        set: &ReadSet,
        kinds: Option<&[MemoryKind]>,
        limit: usize,
    ) -> Result<(Vec<(Ranking, bool)>, Vec<String>), ToolError> {
        let pool = i64::try_from((limit * 4).clamp(20, 400)).unwrap_or(400);
        let terms = fts::search_terms(text);
        let df = self.document_frequencies(&terms).await?;
        let plan = LegPlan::new(&terms, &df);
        let mut candidates: Vec<(Ranking, bool)> = Vec::new();
        let mut seen: HashSet<MemoryId> = HashSet::new();
        let visible = self.visible_in_match(caller).await?;
        for leg in plan.legs {
            if leg.partial && candidates.len() >= limit {
                break;
            }
            let found = self
                .fts_candidates(&visible, &leg.text, leg.mode, leg.order, set, kinds, pool)
                .await?;
            candidates.extend(
                found
                    .into_iter()
                    .filter(|c| seen.insert(c.id.clone()))
                    .map(|c| (c, !leg.partial)),
            );
        }
        let counted = terms
            .into_iter()
            .zip(df)
            .filter(|(_, d)| *d <= RELEVANCE_BUDGET)
            .map(|(t, _)| t)
            .collect();
        Ok((candidates, counted))
    }

    /// The dense leg: the memories nearest to the query's vector that the
    /// caller reads **now** (the index pre-filters by the caller's own
    /// memories and `member_scopes`, the read set and the kinds, with each
    /// memory's state as of the index's last refresh; this query decides),
    /// live, in the read set and of the kinds asked for, at least
    /// [`DENSE_FLOOR`] close and within [`DENSE_SPREAD`] of the nearest of
    /// *those*; nearest first, at most [`FUSION_DEPTH`].
    async fn dense_candidates(
        &self,
        caller: &Caller,
        member_scopes: &[String],
        query: &zm_embed::Vector,
        set: &ReadSet,
        kinds: Option<&[MemoryKind]>,
        fusion: Fusion,
    ) -> Result<Vec<(Ranking, f32)>, ToolError> {
        let reader = Reader {
            user: &caller.user_id,
            member_scopes,
            kinds,
        };
        let near: Vec<(MemoryId, f32)> = self
            .nearest(query, &reader, set, DENSE_PREFILTER)
            .into_iter()
            .filter(|(_, c)| f64::from(*c) >= fusion.dense_floor)
            .collect();
        // The index pre-filtered by visibility and kind as of its last
        // refresh, so nearly every id is readable: check
        // them in rounds of twice the depth, nearest first, and stop once
        // the depth is filled or a candidate is far below the nearest
        // readable one (not a match by meaning either) — the same first
        // [`FUSION_DEPTH`] as checking all at once, in a statement half
        // the size. The spread is measured from the nearest memory this
        // caller reads now, never from one they do not: what they cannot
        // read decides nothing about what they get.
        let mut found: Vec<(Ranking, f32)> = Vec::with_capacity(FUSION_DEPTH);
        let within = |found: &[(Ranking, f32)], c: f32| {
            found
                .first()
                .is_none_or(|(_, best)| f64::from(c) >= f64::from(*best) - fusion.dense_spread)
        };
        for round in near.chunks(2 * FUSION_DEPTH) {
            if !round.first().is_some_and(|(_, c)| within(&found, *c)) {
                break;
            }
            let mut sql = Sql::new(&format!(
                "SELECT {RANK_COLUMNS}, CAST(0.0 AS DOUBLE PRECISION) AS rel FROM memories m WHERE m.id IN "
            ));
            sql.bind_list(round.iter().map(|(id, _)| id.as_str()));
            sql.push(" AND m.invalidated_at IS NULL AND ");
            push_visible(&mut sql, "m", &caller.user_id);
            sql.push(" AND ");
            push_read_set_filter(&mut sql, "m", set);
            if let Some(kinds) = kinds {
                sql.push(" AND m.kind IN ")
                    .bind_list(kinds.iter().map(|k| k.as_str()));
            }
            let rows = sql.query().fetch_all(&self.pool).await.db("dense leg")?;
            let mut readable: HashMap<MemoryId, Ranking> = Ranking::from_rows(&rows)?
                .into_iter()
                .map(|r| (r.id.clone(), r))
                .collect();
            for (id, c) in round {
                if found.len() == FUSION_DEPTH || !within(&found, *c) {
                    return Ok(found);
                }
                if let Some(r) = readable.remove(id) {
                    found.push((r, *c));
                }
            }
            if found.len() == FUSION_DEPTH {
                break;
            }
        }
        Ok(found)
    }

    /// Hits within the read set, best first, at most `limit`, with the
    /// pending conflicts that touch any of them.
    ///
    /// * **Lexical** (no model, or the query could not be embedded):
    ///   memories holding every query word rank above memories holding only
    ///   some; within each, by relevance × decay. The score is in [0, 1):
    ///   at least 0.5 when every word matched.
    /// * **Hybrid**: the full-text candidates (in that order, without
    ///   decay) and the dense leg's (by cosine), the first [`FUSION_DEPTH`]
    ///   of each, fused by reciprocal rank ([`RRF_K`]), each leg's hits
    ///   weighed ([`Fusion::lexical_weight`], [`DENSE_WEIGHT`]), then ×
    ///   decay. The score keeps the lexical tiers: the fused rank score,
    ///   over its best possible, halved, plus 0.5 for a memory holding
    ///   every query word (in [0.5, 1]); any other hit is below 0.5.
    ///
    /// Either way a memory with a pending challenge weighs 0.8.
    async fn ranked(
        &self,
        caller: &Caller,
        text: &str,
        set: &ReadSet,
        kinds: Option<&[MemoryKind]>,
        limit: usize,
    ) -> Result<Ranked, ToolError> {
        let fusion = self.fusion();
        // The query is embedded (on a blocking thread) while the full-text
        // legs run.
        let started = std::time::Instant::now();
        // With a model, the scopes whose shared memories the caller reads
        // (the dense leg's filter) are read meanwhile too.
        let (query, lexical, member_scopes) = tokio::join!(
            async {
                // A query with no word at all ("?!", "🎉") has no meaning
                // to look for: the model's vector of it is noise.
                let q = if fts::query_terms(text).is_empty() {
                    None
                } else {
                    self.embed_query(text).await
                };
                (q, started.elapsed())
            },
            async {
                let l = self
                    .lexical_candidates(caller, text, set, kinds, limit)
                    .await;
                (l, started.elapsed())
            },
            async {
                match self.encoder() {
                    Some(_) => self.member_scopes(&caller.user_id).await,
                    None => Ok(Vec::new()),
                }
            }
        );
        let ((query, embedded), (lexical, matched)) = (query, lexical);
        let (mut lexical, counted) = lexical?;
        let member_scopes = member_scopes?;
        let both = started.elapsed();
        // Full-text relevance: the tier (every word or some), then bm25
        // squashed into [0, 0.5) and × `w` (the decay; 1 for the fusion's
        // own order, which has none).
        let lexical_score = |rel: f64, every_word: bool, w: f64| {
            let rel = rel.max(0.0);
            let within = rel / (1.0 + rel) * w / 2.0;
            if every_word {
                0.5 + within
            } else {
                within.min(BELOW_TIER)
            }
        };
        let lexical_order = |rel: f64, every_word: bool| lexical_score(rel, every_word, 1.0);
        // Every memory the full-text legs found, and whether it holds every
        // query word, before the fusion's leg is cut: one past the cut that
        // the dense leg brings back was still matched by full text
        // (`fts_matched`), and one holding every word keeps its tier (the
        // contract's). Its weight in the fusion is the dense leg's alone.
        let by_full_text: HashMap<MemoryId, bool> = if query.is_some() {
            lexical
                .iter()
                .map(|(c, every_word)| (c.id.clone(), *every_word))
                .collect()
        } else {
            HashMap::new()
        };
        if query.is_some() {
            // The fusion's full-text leg: its first FUSION_DEPTH, or
            // `limit` when that is more.
            lexical.sort_by(|a, b| {
                lexical_order(b.0.rel, b.1)
                    .total_cmp(&lexical_order(a.0.rel, a.1))
                    .then(b.0.created_at.cmp(&a.0.created_at))
            });
            lexical.truncate(FUSION_DEPTH.max(limit));
        }
        // The share of the query's words each partial hit of that leg
        // holds, while the dense leg runs.
        let partial: Vec<MemoryId> = lexical
            .iter()
            .filter(|(_, every_word)| !*every_word)
            .map(|(c, _)| c.id.clone())
            .collect();
        let (dense, coverage) = match &query {
            Some(q) => {
                // The share's statement first: it is sent before the
                // dense leg's vector scan (synchronous) runs.
                let (coverage, dense) = tokio::join!(
                    async {
                        if fusion.coverage_exponent > 0.0 && !counted.is_empty() {
                            self.coverage(&counted, &partial).await
                        } else {
                            Ok(HashMap::new())
                        }
                    },
                    self.dense_candidates(caller, &member_scopes, q, set, kinds, fusion)
                );
                (dense?, coverage?)
            }
            None => (Vec::new(), HashMap::new()),
        };
        let dense_done = started.elapsed();
        let ids: Vec<MemoryId> = lexical
            .iter()
            .map(|(c, _)| c.id.clone())
            .chain(dense.iter().map(|(c, _)| c.id.clone()))
            .collect();
        let disputes = self.disputes(caller, &ids).await?;
        tracing::debug!(
            target: "zm_store::ranked",
            embedded_us = embedded.as_micros(),
            lexical_us = matched.as_micros(),
            both_us = both.as_micros(),
            dense_us = (dense_done - both).as_micros(),
            disputes_us = (started.elapsed() - dense_done).as_micros(),
            "ranking stages"
        );
        let now = self.now();
        let weight = |c: &Ranking| {
            let w = decay(c.kind, now - c.created_at);
            if disputes.challenged.contains(&c.id) {
                w * 0.8
            } else {
                w
            }
        };
        let mut ranked: Vec<Hit> = match &query {
            None => lexical
                .into_iter()
                .map(|(c, every_word)| {
                    let score = lexical_score(c.rel, every_word, weight(&c));
                    Hit::of(c, score, None, true)
                })
                .collect(),
            Some(q) => {
                // (the memory, its fused weight, found by full text, holds
                // every word)
                let mut fused: HashMap<MemoryId, (Ranking, f64, bool, bool)> = HashMap::new();
                for (rank, (c, every_word)) in lexical.into_iter().enumerate() {
                    // No word counted (every one too common): a partial
                    // hit weighs PARTIAL_WEIGHT.
                    let share = coverage.get(&c.id).copied().unwrap_or(1.0);
                    let w = fusion.lexical_weight(every_word, share);
                    let rrf = w / (fusion.rrf_k + rank as f64 + 1.0);
                    fused.insert(c.id.clone(), (c, rrf, true, every_word));
                }
                for (rank, (c, _)) in dense.into_iter().enumerate() {
                    let rrf = fusion.dense_weight / (fusion.rrf_k + rank as f64 + 1.0);
                    let (fts, every_word) = by_full_text
                        .get(&c.id)
                        .map_or((false, false), |&every_word| (true, every_word));
                    fused
                        .entry(c.id.clone())
                        .and_modify(|e| e.1 += rrf)
                        .or_insert((c, rrf, fts, every_word));
                }
                let best = (1.0 + fusion.dense_weight) / (fusion.rrf_k + 1.0);
                fused
                    .into_values()
                    .map(|(c, rrf, fts, every_word)| {
                        let similarity = self.cosine_of(q, &c.id).map(f64::from);
                        // The contract's tiers hold in both modes: a
                        // memory holding every word of the query ranks
                        // first, at 0.5 or more; the fused order ranks
                        // within each tier.
                        let fused = rrf / best * weight(&c) / 2.0;
                        let score = if every_word {
                            0.5 + fused
                        } else {
                            // Below 0.5 even at the very top of both legs
                            // with no decay (a clock ahead of the writer's).
                            fused.min(BELOW_TIER)
                        };
                        Hit::of(c, score, similarity, fts)
                    })
                    .collect()
            }
        };
        // Ties (a batch written in one millisecond) by id, so the order
        // and the cut at `limit` do not depend on a map's iteration.
        ranked.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then(b.ranking.created_at.cmp(&a.ranking.created_at))
                .then(a.ranking.id.as_str().cmp(b.ranking.id.as_str()))
        });
        ranked.truncate(limit);
        let mut contents = self
            .contents(caller, ranked.iter().map(|h| h.ranking.id.as_str()))
            .await?;
        // A hit deleted between the two queries (`delete_account` of its
        // owner), forgotten or superseded meanwhile, or no longer the
        // caller's to read (a removal from its team, an unsharing), is
        // dropped, not shown.
        let hits = ranked
            .into_iter()
            .filter_map(|h| {
                let content = contents.remove(h.ranking.id.as_str())?;
                Some(ScoredHit {
                    memory: h.ranking.with_content(content),
                    score: h.score,
                    similarity: h.similarity,
                    fts_matched: h.fts_matched,
                })
            })
            .collect();
        Ok(Ranked { hits, disputes })
    }

    /// The whole content of those of these memories that are still live
    /// and the caller's to read, by id (both checked again: the ranking
    /// ran in another statement).
    async fn contents<'a>(
        &self,
        caller: &Caller,
        ids: impl IntoIterator<Item = &'a str>,
    ) -> Result<HashMap<String, String>, ToolError> {
        let ids: Vec<&str> = ids.into_iter().collect();
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        // At most the first 200,000 characters (what PostgreSQL's
        // full-text column indexes, migration 27): only an excerpt of
        // them is shown, and a hundred whole memories at the highest
        // text limit were a hundred mebibytes per recall.
        let mut sql = Sql::new(&format!(
            "SELECT m.id AS id, substr(m.content, 1, {HIT_READ_CHARS}) AS content FROM memories m WHERE m.id IN "
        ));
        sql.bind_list(ids)
            .push(" AND m.invalidated_at IS NULL AND ");
        push_visible(&mut sql, "m", &caller.user_id);
        let rows = sql.query().fetch_all(&self.pool).await.db("hit contents")?;
        rows.iter()
            .map(|r| Ok((col(r, "id")?, col(r, "content")?)))
            .collect()
    }

    /// Pending conflicts (owned by the caller, both memories the caller's:
    /// a pair half handed over names nothing the caller can open) touching
    /// these memories, in one query: which of them carry a pending
    /// challenge, and for each, the newest dispute and the other memory of
    /// a pair.
    async fn disputes(&self, caller: &Caller, ids: &[MemoryId]) -> Result<Disputes, ToolError> {
        let mut out = Disputes::default();
        if ids.is_empty() {
            return Ok(out);
        }
        let mut sql = crate::conflicts::owned_conflicts(
            "c.id AS id, c.memory_a AS memory_a, c.memory_b AS memory_b, c.verdict AS verdict",
            &caller.user_id,
        );
        sql.push(&crate::conflicts::owned_and_live())
            .push(" AND c.status = 'pending' AND (c.memory_a IN ")
            .bind_list(ids.iter().map(MemoryId::as_str));
        sql.push(" OR c.memory_b IN ")
            .bind_list(ids.iter().map(MemoryId::as_str))
            .push(") ORDER BY c.created_at DESC, c.id DESC");
        for r in sql.query().fetch_all(&self.pool).await.db("disputes")? {
            let id: String = col(&r, "id")?;
            let a: MemoryId = id_col(&r, "memory_a")?;
            let b: Option<MemoryId> = opt_id_col(&r, "memory_b")?;
            let verdict: ConflictVerdict = enum_col(&r, "verdict")?;
            if verdict == ConflictVerdict::Challenged {
                out.challenged.insert(a.clone());
            }
            out.by_memory
                .entry(a.clone())
                .or_insert((id.clone(), b.clone()));
            if let Some(b) = b {
                out.by_memory.entry(b).or_insert((id, Some(a)));
            }
        }
        Ok(out)
    }

    /// Entities attached to memories: memory id → entities.
    async fn entities_of(
        &self,
        ids: &[MemoryId],
    ) -> Result<HashMap<MemoryId, Vec<AttachedEntity>>, ToolError> {
        let mut out: HashMap<MemoryId, Vec<AttachedEntity>> = HashMap::new();
        if ids.is_empty() {
            return Ok(out);
        }
        let mut sql = Sql::new(
            "SELECT me.memory_id, e.id, e.name, e.type FROM memory_entities me JOIN entities e ON e.id = me.entity_id WHERE me.memory_id IN ",
        );
        sql.bind_list(ids.iter().map(MemoryId::as_str))
            .push(&format!(
                " ORDER BY {}, e.id",
                self.backend.bytewise("e.name")
            ));
        let rows = sql.query().fetch_all(&self.pool).await.db("entities of")?;
        for e in AttachedEntity::from_rows(&rows)? {
            out.entry(e.memory_id.clone()).or_default().push(e);
        }
        Ok(out)
    }

    /// Typed-link neighbours of memories that the caller can read, live,
    /// in the read set. Fail-open: none when the graph cannot be read
    /// (the cause is in the log); recall's hits and a briefing stand
    /// without them.
    async fn neighbours(&self, caller: &Caller, ids: &[MemoryId], set: &ReadSet) -> Vec<Neighbour> {
        match self.read_neighbours(caller, ids, set).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(target: "zm_store", error = %e.message, "linked neighbours left out");
                Vec::new()
            }
        }
    }

    /// [`Store::neighbours`], its failure told.
    async fn read_neighbours(
        &self,
        caller: &Caller,
        ids: &[MemoryId],
        set: &ReadSet,
    ) -> Result<Vec<Neighbour>, ToolError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut sql = Sql::new(&format!(
            "SELECT l.src AS l_src, l.dst AS l_dst, l.type AS l_type, {CANDIDATE_COLUMNS} \
             FROM memory_links l {} memories m ON (m.id = l.dst AND l.src IN ",
            driving_join(self.backend)
        ));
        sql.bind_list(ids.iter().map(MemoryId::as_str))
            .push(") OR (m.id = l.src AND l.dst IN ")
            .bind_list(ids.iter().map(MemoryId::as_str));
        sql.push(") WHERE m.invalidated_at IS NULL AND ");
        push_visible(&mut sql, "m", &caller.user_id);
        sql.push(" AND ");
        push_read_set(&mut sql, "m", set);
        sql.push(" ORDER BY l.created_at DESC, l.src, l.dst, l.type LIMIT 200");
        let rows = sql.query().fetch_all(&self.pool).await.db("neighbours")?;
        rows.iter()
            .map(|r| {
                let c = Candidate::from_row(r)?;
                let src: MemoryId = id_col(r, "l_src")?;
                let dst: MemoryId = id_col(r, "l_dst")?;
                // "of → id": `of` is the hit, `neighbour` the other end.
                let of = if c.id == dst { src } else { dst };
                Ok(Neighbour {
                    of,
                    relation: enum_col(r, "l_type")?,
                    memory: c,
                })
            })
            .collect()
    }

    fn session_after_read(plan: &ReadPlan, thread: Option<String>) -> SessionState {
        SessionState {
            // First attach wins: a pin attaches only an unattached session
            // (or one attached to a project the caller no longer reaches).
            attached_project: plan.attached.clone().or_else(|| plan.pin.clone()),
            thread,
        }
    }

    /// Search memories.
    pub(crate) async fn recall(
        &self,
        caller: &Caller,
        input: RecallInput,
    ) -> Result<RecallOutput, ToolError> {
        let plan = self
            .plan_read(
                caller,
                input.scopes.as_deref(),
                input.project_hint.as_deref(),
                input.thread.as_deref(),
                false,
            )
            .await?;
        let k = usize::try_from(input.k.clamp(1, 100)).unwrap_or(100);
        let Ranked { hits, disputes } = self
            .ranked(caller, &input.query, &plan.set, input.kinds.as_deref(), k)
            .await?;
        let ids: Vec<MemoryId> = hits.iter().map(|h| h.memory.id.clone()).collect();
        let graph = if input.include_graph {
            self.entities_of(&ids).await?
        } else {
            HashMap::new()
        };
        let terms = fts::search_terms(&input.query);
        let now = self.now();
        let memories = hits
            .iter()
            .map(|h| {
                let (c, score) = (&h.memory, h.score);
                let dispute = disputes.by_memory.get(&c.id);
                SearchHit {
                    id: c.id.clone(),
                    content: excerpt(&c.content, &terms, INLINE_CHARS).0,
                    kind: c.kind,
                    scope: c.scope.clone(),
                    team: plan.team_of(caller, &c.scope),
                    visibility: c.visibility,
                    created_at: rfc3339(c.created_at),
                    score: (score * 1e6).round() / 1e6,
                    disputed: dispute.is_some(),
                    dispute_id: dispute.map(|d| d.0.clone()),
                    dispute_with: dispute.and_then(|d| d.1.as_ref().map(MemoryId::to_string)),
                    similarity: h.similarity.map(|s| (s * 1e6).round() / 1e6),
                    fts_matched: h.fts_matched,
                    stale_days: stale_days(c, caller, now),
                    entities: input.include_graph.then(|| {
                        graph
                            .get(&c.id)
                            .into_iter()
                            .flatten()
                            .map(|e| ContextEntity {
                                id: e.id.clone(),
                                name: e.name.clone(),
                                entity_type: e.entity_type,
                                types: None,
                                count: None,
                            })
                            .collect()
                    }),
                }
            })
            .collect();
        // Related stubs: at most 2 per hit and 8 in all, not hits themselves.
        let mut related = Vec::new();
        let mut per_hit: HashMap<MemoryId, usize> = HashMap::new();
        for n in self.neighbours(caller, &ids, &plan.set).await {
            let id = &n.memory.id;
            if related.len() == RELATED_CAP || ids.contains(id) {
                continue;
            }
            let count = per_hit.entry(n.of.clone()).or_default();
            if *count == RELATED_PER_HIT || related.iter().any(|r: &RelatedStub| &r.id == id) {
                continue;
            }
            *count += 1;
            related.push(RelatedStub {
                id: id.clone(),
                of: n.of,
                relation: n.relation,
                kind: n.memory.kind,
                preview: headline(&n.memory.content, RELATED_PREVIEW_CHARS).0,
            });
        }
        let thread = plan.thread.as_ref().map(|t| t.token.clone());
        Ok(RecallOutput {
            memories,
            session: Self::session_after_read(&plan, thread),
            project_scope: plan.pin,
            related,
        })
    }

    /// Build a context pack / briefing.
    pub(crate) async fn build_context(
        &self,
        caller: &Caller,
        input: BuildContextInput,
    ) -> Result<BuildContextOutput, ToolError> {
        let plan = self
            .plan_read(
                caller,
                input.scopes.as_deref(),
                input.project_hint.as_deref(),
                input.thread.as_deref(),
                input.briefing,
            )
            .await?;
        let (max_memories, max_entities) = match input.max_tokens {
            Some(t) => (
                ((t / 200) as usize).clamp(3, 24),
                ((t / 300) as usize).clamp(3, 24),
            ),
            None => (10, 10),
        };
        let linked_cap = max_memories.div_ceil(2);
        // What each memory inlined may hold: about 4 characters a token of
        // the budget, shared by the memories and the linked ones.
        let inline = input.max_tokens.map_or(INLINE_CHARS, |t| {
            (t as usize).saturating_mul(4) / (max_memories + linked_cap)
        });
        let inline = inline.clamp(BUDGET_MIN_INLINE_CHARS, INLINE_CHARS);
        let now = self.now();
        // A briefing delivers some memories as rules: those are not listed
        // again (a promoted memory whose rule is not delivered here, one
        // past its 90 days or for another project, is).
        let delivery = if input.briefing {
            // A project's rules reach the briefings pinned to it (and those
            // that name it in `scopes`), no other: the team projects a
            // default read set takes in are read, but their rules are for
            // their own repositories. Teams' own rules (the team layer)
            // are delivered whatever the set.
            let rule_set = match (&input.scopes, &plan.set, &plan.pin) {
                // Named scopes, and the hinted project a briefing pins
                // whatever it reads.
                (Some(_), ReadSet::Scopes(named), pin) => {
                    let mut v = named.clone();
                    if let Some(p) = pin
                        && !v.contains(p)
                    {
                        v.push(p.clone());
                    }
                    ReadSet::Scopes(v)
                }
                (Some(_), ReadSet::All, None) => ReadSet::All,
                (_, _, Some(pin)) => pinned_read_set(caller, pin),
                (None, _, None) => {
                    ReadSet::Scopes(vec![caller.personal_scope(), caller.core_scope()])
                }
            };
            self.delivered_rules(caller, &rule_set).await?
        } else {
            Delivery::default()
        };
        let ruled = &delivery.memories;
        let hits: Vec<(Candidate, f64)> = self
            .ranked(
                caller,
                &input.topic,
                &plan.set,
                None,
                max_memories + ruled.len(),
            )
            .await?
            .hits
            .into_iter()
            .filter(|h| !ruled.contains(&h.memory.id))
            .take(max_memories)
            .map(|h| (h.memory, h.score))
            .collect();
        let ids: Vec<MemoryId> = hits.iter().map(|(c, _)| c.id.clone()).collect();
        let terms = fts::search_terms(&input.topic);
        let memories: Vec<ContextMemory> = hits
            .iter()
            .map(|(c, score)| {
                c.context(
                    excerpt(&c.content, &terms, inline),
                    Some((score * 1e6).round() / 1e6),
                )
            })
            .collect();

        // Entities of the hits, collapsed by name: `count` is how many of
        // the hits name it (one naming it under two types counts once).
        // Edges are read among the listed names (the caller's own edges,
        // whichever scope their entities were named in: `link` names them
        // in the personal scope, a project memory in its project);
        // co-mentions among all.
        let ents = self.entities_of(&ids).await?;
        let mut collapsed: Vec<(String, ContextEntity, Vec<&MemoryId>)> = Vec::new();
        let mut entity_ids: Vec<EntityId> = Vec::new();
        for id in &ids {
            for ent in ents.get(id).into_iter().flatten() {
                let etype = ent.entity_type;
                entity_ids.push(ent.id.clone());
                let key = crate::memories::match_key(&ent.name);
                if let Some((_, e, mentioned)) = collapsed.iter_mut().find(|(k, _, _)| *k == key) {
                    if !mentioned.contains(&id) {
                        mentioned.push(id);
                    }
                    let types = e.types.get_or_insert_with(|| vec![e.entity_type]);
                    if !types.contains(&etype) {
                        types.push(etype);
                    }
                } else if collapsed.len() < max_entities {
                    collapsed.push((
                        key,
                        ContextEntity {
                            id: ent.id.clone(),
                            name: ent.name.clone(),
                            entity_type: etype,
                            types: None,
                            count: None,
                        },
                        vec![id],
                    ));
                }
            }
        }
        let listed: Vec<(String, String)> = collapsed
            .iter()
            .map(|(k, e, _)| (k.clone(), e.name.clone()))
            .collect();
        let mut collapsed: Vec<ContextEntity> = collapsed
            .into_iter()
            .map(|(_, mut e, mentioned)| {
                e.count = Some(u32::try_from(mentioned.len()).unwrap_or(u32::MAX));
                e
            })
            .collect();
        for e in &mut collapsed {
            if e.types.as_ref().is_some_and(|t| t.len() < 2) {
                e.types = None;
            }
        }
        let edges = self.edges_among(caller, &listed).await?;

        // Linked memories: entity co-mentions and typed-link neighbours.
        let linked = self
            .linked_memories(
                caller,
                (&ids, ruled),
                &entity_ids,
                &plan.set,
                linked_cap,
                inline,
            )
            .await?;

        // Thread assertion: only with a pinned project (a fresh signed
        // token; nothing is written). Otherwise a live thread is echoed.
        let thread = match &plan.pin {
            Some(pin) => self
                .assert_thread(
                    caller,
                    plan.thread.as_ref(),
                    input.conversation_id.as_deref(),
                    pin,
                )
                .map(|t| t.token),
            None => plan.thread.as_ref().map(|t| t.token.clone()),
        };

        let mut out = BuildContextOutput {
            memories,
            entities: collapsed,
            edges,
            linked_memories: linked,
            project_scope: plan.pin.clone(),
            recent: Vec::new(),
            rules: Vec::new(),
            open_loops: Vec::new(),
            open_loops_total: 0,
            session: Self::session_after_read(&plan, thread),
        };
        if input.briefing {
            out.recent = self.recent(caller, &plan.set, &ids, ruled, now).await?;
            let (loops, total) = self.open_loops(caller, &plan.set, &ids, now).await?;
            out.open_loops = loops;
            out.open_loops_total = total;
            out.rules = delivery.rules.into_iter().map(|(_, r)| r).collect();
        }
        Ok(out)
    }

    /// The caller's own edges between entities named as two of `listed`
    /// (match key, the name the briefing lists), each end called by its
    /// listed name. Edges are a user's personal graph (`link` names its
    /// entities in the personal scope, a project memory names them in its
    /// project: the names, not the entity rows, meet), so a teammate
    /// reading a memory shared into a team sees its entities but not the
    /// author's edges between them. An edge of an unknown type is a
    /// corrupt row, not one to drop.
    async fn edges_among(
        &self,
        caller: &Caller,
        listed: &[(String, String)],
    ) -> Result<Vec<ContextEdge>, ToolError> {
        if listed.len() < 2 {
            return Ok(Vec::new());
        }
        // The caller's entities of those names (by `entities_owner_key`),
        // then their edges (by the edges' own indexes).
        let mut sql = Sql::new("SELECT id, match_key FROM entities WHERE owner_id = ");
        sql.bind_str(&caller.user_id).push(" AND match_key IN ");
        sql.bind_list(listed.iter().map(|(k, _)| k.clone()));
        let mut key_of: HashMap<String, String> = HashMap::new();
        for r in &sql.query().fetch_all(&self.pool).await.db("edge ends")? {
            key_of.insert(col(r, "id")?, col(r, "match_key")?);
        }
        if key_of.len() < 2 {
            return Ok(Vec::new());
        }
        let mut sql = Sql::new(
            "SELECT g.id, g.src, g.dst, g.type, g.weight FROM edges g WHERE g.src <> g.dst AND g.owner_id = ",
        );
        sql.bind_str(&caller.user_id).push(" AND g.src IN ");
        sql.bind_list(key_of.keys().cloned())
            .push(" AND g.dst IN ")
            .bind_list(key_of.keys().cloned());
        sql.push(" ORDER BY g.created_at, g.id LIMIT 100");
        let name = |id: &str| {
            key_of
                .get(id)
                .and_then(|k| listed.iter().find(|(key, _)| key == k))
                .map(|(_, n)| n.clone())
        };
        let mut out = Vec::new();
        for r in &sql.query().fetch_all(&self.pool).await.db("edges")? {
            let (src, dst): (String, String) = (col(r, "src")?, col(r, "dst")?);
            let (Some(src), Some(dst)) = (name(&src), name(&dst)) else {
                continue;
            };
            // Two entities of one name (two types) are one listed entity:
            // an edge between them is none, and their edges of one type to
            // one other entity are one edge (the first made).
            let edge_type: zm_contracts::EdgeType = enum_col(r, "type")?;
            if src == dst
                || out
                    .iter()
                    .any(|e: &ContextEdge| e.src == src && e.dst == dst && e.edge_type == edge_type)
            {
                continue;
            }
            out.push(ContextEdge {
                src,
                dst,
                edge_type,
                weight: col(r, "weight")?,
            });
        }
        Ok(out)
    }

    async fn linked_memories(
        &self,
        caller: &Caller,
        (hit_ids, ruled): (&[MemoryId], &HashSet<MemoryId>),
        entity_ids: &[EntityId],
        set: &ReadSet,
        cap: usize,
        inline: usize,
    ) -> Result<Vec<ContextMemory>, ToolError> {
        let mut out: Vec<ContextMemory> = Vec::new();
        // Episodes and open loops have their own briefing legs.
        let excluded = |k: MemoryKind| {
            matches!(
                k,
                MemoryKind::Episode | MemoryKind::Task | MemoryKind::OpenQuestion
            )
        };
        let push = |c: &Candidate, out: &mut Vec<ContextMemory>| {
            // A memory delivered as a rule is not listed again.
            if out.len() < cap
                && !hit_ids.contains(&c.id)
                && !ruled.contains(&c.id)
                && !excluded(c.kind)
                && !out.iter().any(|m| m.id == c.id)
            {
                out.push(c.context(headline(&c.content, inline), None));
            }
        };
        // A reserved share for typed-link neighbours first.
        for n in self.neighbours(caller, hit_ids, set).await {
            if out.len() >= cap.div_ceil(2) {
                break;
            }
            push(&n.memory, &mut out);
        }
        if !entity_ids.is_empty() {
            // The newest hundred memories naming the entities, picked by
            // id and order only (the inner query), then their columns (the
            // outer one), in one statement: a memory naming two of them is
            // met twice, and making the rows distinct with their previews
            // held every match's 2,400 characters at once (tens of
            // thousands for an entity every memory names).
            let mut sql = Sql::new(&format!(
                "SELECT {CANDIDATE_COLUMNS} FROM memories m WHERE m.id IN (SELECT co.id FROM (\
                 SELECT DISTINCT m.id AS id, m.seq AS seq FROM memory_entities me {} memories m ON m.id = me.memory_id WHERE me.entity_id IN ",
                driving_join(self.backend)
            ));
            sql.bind_list(entity_ids.iter().map(EntityId::as_str));
            // What `push` would drop is left out before the limit (the
            // kinds with legs of their own, the hits, the memories
            // delivered as rules, those already listed), so a hundred
            // newer episodes naming an entity never hide its one decision.
            sql.push(" AND m.invalidated_at IS NULL AND m.kind NOT IN ");
            sql.bind_list(
                MemoryKind::ALL
                    .iter()
                    .copied()
                    .filter(|k| excluded(*k))
                    .map(MemoryKind::as_str),
            );
            let taken: Vec<&str> = hit_ids
                .iter()
                .chain(ruled.iter())
                .chain(out.iter().map(|m| &m.id))
                .map(MemoryId::as_str)
                .collect();
            sql.and_not_in("m.id", taken);
            sql.push(" AND ");
            push_visible(&mut sql, "m", &caller.user_id);
            sql.push(" AND ");
            push_read_set(&mut sql, "m", set);
            sql.push(" ORDER BY m.seq DESC LIMIT 100) co) ORDER BY m.seq DESC");
            let rows = sql.query().fetch_all(&self.pool).await.db("co-mentions")?;
            for c in Candidate::from_rows(&rows)? {
                push(&c, &mut out);
            }
        }
        Ok(out)
    }

    async fn recent(
        &self,
        caller: &Caller,
        set: &ReadSet,
        hit_ids: &[MemoryId],
        ruled: &HashSet<MemoryId>,
        now: i64,
    ) -> Result<Vec<ContextMemory>, ToolError> {
        // The caller's own authoritative writes of the last two weeks, but
        // for the briefing's hits and the memories it delivers as rules
        // (left out before the limit, so older ones fill their places).
        let mut sql = Sql::new(&format!(
            "SELECT {CANDIDATE_COLUMNS} FROM memories m WHERE m.owner_id = "
        ));
        sql.bind_str(&caller.user_id);
        sql.push(" AND m.invalidated_at IS NULL AND m.kind IN ('decision', 'fact', 'gotcha', 'convention') AND m.created_at >= ");
        sql.bind_i64(now - RECENT_DAYS * DAY_MS).push(" AND ");
        push_read_set(&mut sql, "m", set);
        let shown: Vec<&str> = hit_ids.iter().chain(ruled).map(MemoryId::as_str).collect();
        sql.and_not_in("m.id", shown);
        sql.push(" ORDER BY m.created_at DESC, m.seq DESC LIMIT ")
            .bind_i64(i64::try_from(RECENT_CAP).unwrap_or(i64::MAX));
        let rows = sql.query().fetch_all(&self.pool).await.db("recent")?;
        Ok(Candidate::from_rows(&rows)?
            .into_iter()
            .map(|c| c.context(headline(&c.content, INLINE_CHARS), None))
            .collect())
    }

    async fn open_loops(
        &self,
        caller: &Caller,
        set: &ReadSet,
        hit_ids: &[MemoryId],
        now: i64,
    ) -> Result<(Vec<ContextMemory>, u32), ToolError> {
        let since = now - OPEN_LOOP_TTL_DAYS * DAY_MS;
        let mut where_ = Sql::new(
            " FROM memories m WHERE m.invalidated_at IS NULL AND m.kind IN ('task', 'open-question') AND m.created_at >= ",
        );
        where_.bind_i64(since).push(" AND ");
        self.visible_to(caller).await?.push(&mut where_, "m");
        where_.push(" AND ");
        push_read_set(&mut where_, "m", set);
        let mut count = Sql::new("SELECT COUNT(*) AS n");
        count.text.push_str(&where_.text);
        count.args = where_.args.clone();
        let total: i64 = col(
            &count.query().fetch_one(&self.pool).await.db("loop count")?,
            "n",
        )?;
        let mut list = Sql::new(&format!("SELECT {CANDIDATE_COLUMNS}"));
        list.text.push_str(&where_.text);
        list.args = where_.args;
        list.push(" ORDER BY m.created_at ASC, m.seq ASC LIMIT ")
            .bind_i64(i64::try_from(OPEN_LOOPS_CAP).unwrap_or(i64::MAX));
        let rows = list.query().fetch_all(&self.pool).await.db("open loops")?;
        let loops = Candidate::from_rows(&rows)?
            .into_iter()
            .map(|c| {
                // Loops nearest the topic are inlined whole; others get a headline.
                let cap = if hit_ids.contains(&c.id) {
                    INLINE_CHARS
                } else {
                    LOOP_HEADLINE_CHARS
                };
                c.context(headline(&c.content, cap), None)
            })
            .collect();
        Ok((loops, u32::try_from(total.max(0)).unwrap_or(u32::MAX)))
    }

    /// The rules a briefing reading `set` delivers: the user layer, the
    /// caller's teams' layer, then the rules of the projects in `set`;
    /// pinned first (at most [`PINNED_RULES_CAP_PER_LAYER`] a layer);
    /// per-layer cap and TTL for unpinned.
    pub async fn rules_for(&self, caller: &Caller, set: &ReadSet) -> Result<Vec<Rule>, ToolError> {
        Ok(self
            .delivered_rules(caller, set)
            .await?
            .rules
            .into_iter()
            .map(|(_, r)| r)
            .collect())
    }

    /// The ids of the rules the caller's briefings deliver: with no project
    /// attached, and attached to each of `projects` (those the rules in
    /// question apply to). What the dashboard says of each rule it lists.
    pub async fn delivered_rule_ids(
        &self,
        caller: &Caller,
        projects: &[String],
    ) -> Result<std::collections::HashSet<String>, ToolError> {
        let mut ids: std::collections::HashSet<String> = self
            .delivered_rules(caller, &ReadSet::Scopes(Vec::new()))
            .await?
            .rules
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let mut projects = projects.to_vec();
        projects.sort_unstable();
        projects.dedup();
        if projects.is_empty() {
            return Ok(ids);
        }
        for p in &projects {
            let set = crate::scopes::pinned_read_set(caller, p);
            ids.extend(
                self.delivered_rules(caller, &set)
                    .await?
                    .rules
                    .into_iter()
                    .map(|(id, _)| id),
            );
        }
        Ok(ids)
    }

    /// [`rules_for`](Self::rules_for), each rule with its id, and the
    /// memories behind them.
    async fn delivered_rules(&self, caller: &Caller, set: &ReadSet) -> Result<Delivery, ToolError> {
        // The caller's own rules, and every member's rules for a scope the
        // caller reaches as a member (a team's or a shared project's).
        let reached = self.member_scopes(&caller.user_id).await?;
        let mut sql = Sql::new(
            "SELECT owner_id, id, memory_id, text, layer, applies_scope, pinned FROM rules WHERE status = ",
        );
        sql.bind_str(crate::rules::RuleState::Promoted.as_str())
            .push(" AND (owner_id = ")
            .bind_str(&caller.user_id);
        sql.push(" OR applies_scope IN ");
        sql.bind_list(reached.iter().cloned());
        // An unpinned rule past its time is delivered by nobody: not read.
        let now = self.now();
        let ttl = now - RULES_TTL_DAYS * DAY_MS;
        sql.push(") AND (pinned = 1 OR promoted_at >= ")
            .bind_i64(ttl)
            .push(") ORDER BY ")
            .push(crate::rules::RULE_ORDER);
        let rows = sql.query().fetch_all(&self.pool).await.db("rules")?;
        type Delivered = ((String, MemoryId), Rule);
        // Per layer (user, team, project): its pinned rules, then the rest.
        let mut pinned: [Vec<Delivered>; 3] = Default::default();
        let mut unpinned: [Vec<Delivered>; 3] = Default::default();
        for r in DeliveredRule::from_rows(&rows)? {
            let reaches = |a: &String| reached.contains(a);
            // A team's own scope is the team layer: its members get its
            // rules in every briefing, like their own user layer.
            let team_root = r.applies_scope.as_deref().is_some_and(|a| {
                crate::teams::team_slug_of(a).is_some() && a.split('.').count() == 2
            });
            let in_set = match (r.layer, &r.applies_scope, set) {
                (RuleLayer::User, _, _) => r.owner_id == caller.user_id,
                (RuleLayer::Project, Some(a), _) if team_root => reaches(a),
                (RuleLayer::Project, Some(a), ReadSet::Scopes(s)) => {
                    s.contains(a) && scope::is_shareable(a) && reaches(a)
                }
                (RuleLayer::Project, _, _) => false,
            };
            if !in_set {
                continue;
            }
            let rule = (
                (r.id, r.memory_id),
                Rule {
                    text: r.text,
                    pinned: r.pinned,
                },
            );
            let layer = if r.layer == RuleLayer::User {
                0
            } else if team_root {
                1
            } else {
                2
            };
            // Unpinned rules past their time were left out by the query;
            // the rows come newest promotion first, so each cap keeps the
            // newest.
            let (bucket, cap) = if r.pinned {
                (&mut pinned[layer], PINNED_RULES_CAP_PER_LAYER)
            } else {
                (&mut unpinned[layer], RULES_CAP_PER_LAYER)
            };
            if bucket.len() < cap {
                bucket.push(rule);
            }
        }
        let mut out = Delivery::default();
        let mut said = std::collections::HashSet::new();
        for ((id, memory), rule) in pinned.into_iter().chain(unpinned).flatten() {
            // A rule saying what another already says is delivered once;
            // its memory is said all the same.
            out.memories.insert(memory);
            if said.insert(rule.text.clone()) {
                out.rules.push((id, rule));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PostgreSQL's counts are not read: a stop word holds none (its
    /// `english` configuration indexes none), every other word one.
    #[test]
    fn postgres_counts_no_stop_word() {
        let terms: Vec<String> = ["because", "latency", "between"].map(String::from).to_vec();
        match document_frequencies_sql(Backend::Postgres, &terms, 100) {
            Frequencies::Unknown(df) => assert_eq!(df, vec![0, 1, 0]),
            Frequencies::Known(_) => panic!("PostgreSQL's counts are not read"),
        }
    }

    /// An excerpt centres on the first whole word matching a query term or
    /// its stem, never on a term found inside another word.
    #[test]
    fn an_excerpt_centres_on_a_matching_word() {
        let text = format!(
            "This page is about many things. {} The invoices table lives in the billing schema. {}",
            "Filler words here. ".repeat(150),
            "More filler. ".repeat(150)
        );
        let at = text.find("The invoices table").unwrap();
        for query in ["where is the invoices table", "invoicing"] {
            let terms = crate::fts::search_terms(query);
            let (cut, truncated) = excerpt(&text, &terms, 600);
            assert!(truncated);
            assert!(cut.contains("invoices table"), "{query}: {cut}");
            assert!(
                cut.starts_with('…') && !cut.contains("This page"),
                "{query}"
            );
        }
        assert!(at > 600);
        // A term inside another word is no match ("is" in "This").
        assert_eq!(
            first_matching_word("This page, then the word is here.", &[vec!['i', 's']]),
            Some(25)
        );
        // Positions count characters, not bytes; the last word counts.
        assert_eq!(
            first_matching_word("Ça va, élan is", &[vec!['i', 's']]),
            Some(12)
        );
        assert!(same_stem(
            &['i', 'n', 'v', 'o', 'i', 'c', 'e', 's'],
            &"invoicing".chars().collect::<Vec<_>>()
        ));
        assert!(!same_stem(&['t', 'h', 'i', 's'], &['i', 's']));
    }

    fn plan(words: &str, df: &[i64]) -> Vec<(String, fts::Match, LegOrder, bool)> {
        let terms = fts::query_terms(words);
        LegPlan::new(&terms, df)
            .legs
            .into_iter()
            .map(|l| (l.text, l.mode, l.order, l.partial))
            .collect()
    }

    #[test]
    fn a_partial_hit_weighs_by_the_share_of_the_query_it_holds() {
        let f = Fusion::DEFAULT;
        assert_eq!(
            f.lexical_weight(true, 0.25),
            1.0,
            "every word: 1, whatever the count"
        );
        assert_eq!(f.lexical_weight(false, 1.0), PARTIAL_WEIGHT);
        assert_eq!(
            f.lexical_weight(false, 0.5),
            PARTIAL_WEIGHT * 0.5f64.powf(COVERAGE_EXPONENT)
        );
        assert!(f.lexical_weight(false, 0.75) > f.lexical_weight(false, 0.25));
        assert_eq!(f.lexical_weight(false, 0.0), 0.0);
        // Out-of-range shares are clamped, never above a whole match.
        assert_eq!(f.lexical_weight(false, 3.0), PARTIAL_WEIGHT);
        // Exponent 0: the fusion before shares were counted.
        let flat = Fusion {
            coverage_exponent: 0.0,
            partial_weight: 0.5,
            ..Fusion::DEFAULT
        };
        assert_eq!(flat.lexical_weight(false, 0.25), 0.5);
        assert_eq!(flat.lexical_weight(false, 1.0), 0.5);
    }

    #[test]
    fn a_small_store_ranks_every_leg_by_relevance() {
        use LegOrder::Relevance;
        assert_eq!(
            plan("billing ledger postgres", &[40, 3, 900]),
            [
                (
                    "billing ledger postgres".into(),
                    fts::Match::All,
                    Relevance,
                    false
                ),
                (
                    "billing ledger postgres".into(),
                    fts::Match::Any,
                    Relevance,
                    true
                ),
            ]
        );
        assert_eq!(
            plan("postgres", &[RELEVANCE_BUDGET]),
            [("postgres".into(), fts::Match::All, Relevance, false)]
        );
        // A word no memory holds adds no leg.
        assert_eq!(
            plan("billing zzz", &[3, 0]),
            [
                ("billing zzz".into(), fts::Match::All, Relevance, false),
                ("billing".into(), fts::Match::Any, Relevance, true),
            ]
        );
        assert!(plan("", &[]).is_empty());
    }

    #[test]
    fn common_words_are_read_newest_first() {
        use LegOrder::{Newest, Relevance};
        let common = RELEVANCE_BUDGET + 1;
        // The rare words are scored; the common ones only fill, newest first.
        assert_eq!(
            plan("the zebrafish sync ledger", &[90_000, 1, common, 2]),
            [
                (
                    "the zebrafish sync ledger".into(),
                    fts::Match::All,
                    Relevance,
                    false
                ),
                ("zebrafish ledger".into(), fts::Match::Any, Relevance, true),
                (
                    "the zebrafish sync ledger".into(),
                    fts::Match::Any,
                    Newest,
                    true
                ),
            ]
        );
        // Rare words whose frequencies together pass the budget: the rarest
        // of them are scored.
        let half = RELEVANCE_BUDGET / 2 + 2;
        assert_eq!(
            plan("alpha beta", &[half, half - 2]),
            [
                ("alpha beta".into(), fts::Match::All, Relevance, false),
                ("beta".into(), fts::Match::Any, Relevance, true),
                ("alpha beta".into(), fts::Match::Any, Newest, true),
            ]
        );
        // Every word common: nothing is scored across all its memories.
        assert_eq!(
            plan("the sync", &[90_000, common]),
            [
                ("the sync".into(), fts::Match::All, Newest, false),
                ("the sync".into(), fts::Match::Any, Newest, true),
            ]
        );
        assert_eq!(
            plan("the", &[90_000]),
            [("the".into(), fts::Match::All, Newest, false)]
        );
    }

    #[test]
    fn candidate_previews_read_one_more_character_than_the_longest_headline() {
        let preview_chars = INLINE_CHARS + 1;
        assert!(
            CANDIDATE_COLUMNS.contains(&format!("substr(m.content, 1, {preview_chars})")),
            "{CANDIDATE_COLUMNS}"
        );
        // The preview cut is seen as a cut.
        let preview: String = "x".repeat(preview_chars);
        assert!(headline(&preview, INLINE_CHARS).1);
    }
}
