//! `remember` and the memory lifecycle (`forget`, `restore_memory`, `close_loop`).

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::any::AnyRow;
use zm_contracts::scope::{self, ScopeSpec};
use zm_contracts::teams::TeamAction;
use zm_contracts::{
    CloseLoopInput, CloseLoopOutput, EntityId, EntityType, ForgetInput, ForgetOutput, IdKind,
    Memory, MemoryId, MemoryKind, MemoryLinkType, RememberInput, RememberOutput,
    RestoreMemoryInput, RestoreMemoryOutput, SessionState, SimilarMemory, ToolError,
    TranslationStatus, Visibility, prefixes::Prefix,
};

use crate::clock::DAY_MS;
use crate::db::DbResult;
use crate::guard;
use crate::limits::Limits;
use crate::rows::{FromAnyRow, col, enum_col, id_col};
use crate::search::{INLINE_CHARS, LOOP_HEADLINE_CHARS};
use crate::service::Cx;
use crate::similarity;
use crate::store::{Caller, Store};
use crate::threads::Thread;

/// Content longer than this gets a `length_directive`.
pub const LONG_CONTENT_CHARS: usize = 1800;
/// How many of the new memory's terms the near-duplicate probe searches
/// for: the rarest in the store of its [`SIMILAR_PROBE_POOL`] longest.
const SIMILAR_PROBE_TERMS: usize = 6;
/// When even the rarest words of the new memory are common, how many of
/// them a candidate must all hold (newest first).
const SIMILAR_COMMON_TERMS: usize = 3;
/// The probe's rare words are held by at most this many memories together:
/// listing and counting their holders stays cheap, and the words are
/// counted only up to it.
const PROBE_BUDGET: i64 = 500;
/// How many of the new memory's longest terms the probe weighs by how many
/// memories hold them (long words are usually the rare ones; counting
/// every word of a long text would cost more than it finds).
const SIMILAR_PROBE_POOL: usize = 12;
/// How many near-duplicate candidates are scored.
const SIMILAR_FETCH: i64 = 24;

/// sha256 of the trimmed content: the exact-dedup key.
pub fn content_hash(content: &str) -> String {
    hex::encode(Sha256::digest(content.trim().as_bytes()))
}

/// Entity match key: the name under NFKC (one form for composed and
/// decomposed accents, full-width and ligature letters), lowercase, with
/// whitespace, `_` and `-` removed, in NFC. Stored keys are recomputed by
/// a migration whenever this changes (schema 15, `db::rekey_entities`).
pub fn match_key(name: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    name.nfkc()
        .filter(|c| !c.is_whitespace() && *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .nfc()
        .collect()
}

/// Can a match key name an entity? It needs a letter or digit (`link`,
/// `remember`'s `entities` and the importer all ask this).
pub fn nameable(key: &str) -> bool {
    key.chars().any(char::is_alphanumeric)
}

/// Display name: trimmed, whitespace collapsed.
pub fn display_name(name: &str) -> String {
    name.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An entity to find or create: who owns it, where, and its names.
pub(crate) struct EntityRef<'a> {
    pub owner: &'a str,
    pub scope: &'a str,
    /// The display name.
    pub name: &'a str,
    /// [`match_key`] of the name.
    pub key: &'a str,
    pub entity_type: EntityType,
}

/// An entity of a scope, as the anchor scan reads it.
struct KnownEntity {
    id: EntityId,
    name: String,
    match_key: String,
}

impl FromAnyRow for KnownEntity {
    fn from_row(r: &AnyRow) -> Result<KnownEntity, ToolError> {
        Ok(KnownEntity {
            id: id_col(r, "id")?,
            name: col(r, "name")?,
            match_key: col(r, "match_key")?,
        })
    }
}

/// Successor ids looked up per statement when hiding unreadable ones
/// (`hide_unreadable_successors`): far below what one statement may bind.
pub(crate) const SUCCESSORS_PER_QUERY: usize = 10_000;

/// A memory a lifecycle change reads: the caller's own, or one a team's
/// steward holds that the caller, its team's admin, changes for it.
pub(crate) struct OwnedMemory {
    /// The caller, or the team steward the caller acts for.
    pub(crate) owner_id: String,
    kind: MemoryKind,
    pub(crate) scope: String,
    pub(crate) visibility: zm_contracts::Visibility,
    pub(crate) invalidated_at: Option<i64>,
    /// The team whose steward holds it, when the caller acts for the
    /// steward as the team's admin; `None` for the caller's own.
    for_team: Option<crate::teams::StewardTeam>,
}

impl OwnedMemory {
    /// Already shared into `target`: a share or move there changes nothing.
    pub(crate) fn is_shared_in(&self, target: &str) -> bool {
        self.scope == target && self.visibility == zm_contracts::Visibility::Shared
    }

    /// Note a change the caller made for a team's steward in the team's
    /// audit log (nothing for the caller's own memory).
    async fn record_for_team(
        &self,
        store: &Store,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        action: zm_contracts::teams::TeamAction,
        id: &str,
    ) -> Result<(), ToolError> {
        match &self.for_team {
            Some(team) => store.record_for_steward(tx, caller, team, action, id).await,
            None => Ok(()),
        }
    }
}

impl FromAnyRow for OwnedMemory {
    fn from_row(r: &AnyRow) -> Result<OwnedMemory, ToolError> {
        Ok(OwnedMemory {
            owner_id: col(r, "owner_id")?,
            kind: enum_col(r, "kind")?,
            scope: col(r, "scope")?,
            visibility: enum_col(r, "visibility")?,
            invalidated_at: col(r, "invalidated_at")?,
            for_team: None,
        })
    }
}

/// The memory a `remember` wrote (or absorbed into): what its later steps
/// work on.
#[derive(Debug, Clone, Copy)]
struct Written<'a> {
    id: &'a str,
    scope: &'a str,
}

/// The pure work of a `remember` — tokenising, the near-duplicate probe,
/// the content hash, match keys — done before its transaction begins, so
/// none of it runs while the write lock (SQLite `BEGIN IMMEDIATE`) is held.
struct Prepared {
    /// [`content_hash`] of the trimmed content.
    hash: String,
    /// The content's tokens, for near-duplicate ranking.
    tokens: Vec<String>,
    /// The near-duplicate probe's pool: the content's longest terms (the
    /// probe keeps the rarest of them in the store).
    probe: String,
    /// How the memory is anchored to entities.
    anchoring: Anchoring,
}

/// The entity anchoring of a `remember`, its match keys computed.
enum Anchoring {
    /// The entities the input names: `(display name, match key)`, in input
    /// order (an empty key is refused when the anchors are written, as
    /// before).
    Named(Vec<(String, String)>),
    /// No entities named: the content's words, scanned for known names.
    Scan(ScanText),
}

/// A text's match key (its words' keys joined, as [`match_key`] joins a
/// name's) and where each word begins in it (`remember`'s scan for known
/// names, and the importer's test of whether an observation names its
/// entity): a name is found only
/// as a run of whole words ("Zero Memory", "zero-memory" and "ZeroMemory"
/// alike), not inside one ("Ann" in "channel", "Redis" across "shared
/// is").
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScanText {
    key: String,
    /// `starts[i]`: does a word begin (or end) at byte `i` of `key`?
    starts: Vec<bool>,
}

impl ScanText {
    pub(crate) fn new(text: &str) -> ScanText {
        let mut key = String::new();
        let mut starts = Vec::new();
        for word in text.split(|c: char| c.is_whitespace() || c == '_' || c == '-') {
            let k = match_key(word);
            if k.is_empty() {
                continue;
            }
            starts.resize(key.len() + 1, false);
            starts[key.len()] = true;
            key.push_str(&k);
        }
        starts.resize(key.len() + 1, false);
        starts[key.len()] = true;
        ScanText { key, starts }
    }

    /// Does `name` (a match key) occur here as a run of whole words? Its
    /// edge may also fall where a letter or digit meets a symbol ("C++"
    /// in "C++,", "Node.js" in "(node.js)").
    pub(crate) fn names(&self, name: &str) -> bool {
        let mut unbounded = usize::MAX;
        self.names_within(name, &mut unbounded) == Some(true)
    }

    /// [`Self::names`], looking at no more than `budget` occurrences of
    /// `name` (each one looked at is taken from it): `None` when the budget
    /// ran out before an answer. A text of one letter repeated holds a
    /// short name at every position, none of them a whole word.
    pub(crate) fn names_within(&self, name: &str, budget: &mut usize) -> Option<bool> {
        if name.is_empty() {
            return Some(false);
        }
        let edge = |at: usize| {
            self.starts[at] || {
                let before = self.key[..at].chars().next_back();
                let after = self.key[at..].chars().next();
                let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() && !unspaced(c));
                !(word(before) && word(after))
            }
        };
        // Every occurrence, overlapping ones too ("abab" in "xabab").
        let mut from = 0;
        while let Some(at) = self.key[from..].find(name).map(|i| from + i) {
            *budget = budget.checked_sub(1)?;
            if edge(at) && edge(at + name.len()) {
                return Some(true);
            }
            from = at + self.key[at..].chars().next().map_or(1, char::len_utf8);
        }
        Some(false)
    }
}

/// How many occurrences of known names a write's anchor scan looks at, in
/// all, before it stops (a few milliseconds' work).
const ANCHOR_SCAN_OCCURRENCES: usize = 100_000;

/// A letter of a script written without spaces between words (Chinese,
/// Japanese kana, Thai, Lao, Khmer, Myanmar): a name beside one has its
/// edge there.
fn unspaced(c: char) -> bool {
    matches!(c as u32,
        0x0E00..=0x0EFF // Thai, Lao
        | 0x1000..=0x109F // Myanmar
        | 0x1780..=0x17FF // Khmer
        | 0x3040..=0x30FF // Hiragana, Katakana
        | 0x3400..=0x4DBF // CJK extension A
        | 0x4E00..=0x9FFF // CJK unified ideographs
        | 0xF900..=0xFAFF // CJK compatibility ideographs
        | 0xFF66..=0xFF9F // halfwidth Katakana
        | 0x20000..=0x3FFFF // CJK extensions B onwards
    )
}

impl Prepared {
    fn new(input: &RememberInput, content: &str) -> Prepared {
        // An empty list names nothing: the content is scanned, as with
        // no list at all.
        let anchoring = match input.entities.as_ref().filter(|e| !e.is_empty()) {
            Some(entities) => Anchoring::Named(
                entities
                    .iter()
                    .map(|e| {
                        let name = display_name(&e.name);
                        let key = match_key(&name);
                        (name, key)
                    })
                    .collect(),
            ),
            None => Anchoring::Scan(ScanText::new(content)),
        };
        Prepared {
            hash: content_hash(content),
            tokens: similarity::tokenize(content),
            probe: crate::fts::distinctive_terms(content, SIMILAR_PROBE_POOL),
            anchoring,
        }
    }
}

/// Where a write goes and how it was decided.
struct Target {
    scope: String,
    via: &'static str,
    confidence: f64,
    routed_to_project: Option<String>,
}

/// What a finished `remember` reports.
struct RememberOutcome {
    memory_id: String,
    deduplicated: bool,
    target: Target,
    similar: Vec<SimilarMemory>,
    anchors: Vec<String>,
    content_chars: usize,
    kind: MemoryKind,
    entities_named: bool,
    session: SessionState,
}

/// The trimmed content, after the length limits and the content guard
/// looked at every free-text field of the input.
fn guarded_content(limits: &Limits, input: &RememberInput) -> Result<String, ToolError> {
    limits.check_text([
        ("content", Some(input.content.as_str())),
        ("verbatim", input.verbatim.as_deref()),
    ])?;
    let content = input.content.trim().to_string();
    if content.is_empty() {
        return Err(ToolError::validation("content must not be empty"));
    }
    let mut fields: Vec<(String, &str)> = vec![("content".into(), content.as_str())];
    if let Some(v) = &input.verbatim {
        fields.push(("verbatim".into(), v.as_str()));
    }
    for (i, e) in input.entities.iter().flatten().enumerate() {
        fields.push((format!("entities[{i}].name"), e.name.as_str()));
    }
    if let Some(hit) = guard::check_fields(fields) {
        return Err(guard::rejection(&hit));
    }
    Ok(content)
}

/// The keys of a memory's provenance that describe its writer's session:
/// the thread token (signed, not encrypted: it carries the scope the
/// thread is pinned to, perhaps a private project's name), the
/// conversation it belongs to and the transport session. They are served
/// to the memory's owner only, and dropped when it is handed over.
pub(crate) const WRITER_SESSION_KEYS: [&str; 3] = ["thread", "conversation", "session"];

/// `source` without [`WRITER_SESSION_KEYS`].
pub(crate) fn strip_writer_session(source: &mut Option<Value>) {
    if let Some(Value::Object(o)) = source {
        for k in WRITER_SESSION_KEYS {
            o.remove(k);
        }
    }
}

/// Server-stamped provenance: how the write was routed, the thread and
/// conversation it belongs to, the transport session, the verbatim text.
fn provenance(
    caller: &Caller,
    target: &Target,
    thread: Option<&Thread>,
    input: &RememberInput,
) -> Value {
    let mut source = json!({"routing": {"via": target.via, "confidence": target.confidence}});
    if let Some(t) = thread {
        source["thread"] = json!(t.token);
        source["conversation"] = json!(t.conversation.to_hex());
    }
    if let Some(s) = &caller.session_id {
        source["session"] = json!(s);
    }
    if let Some(v) = &input.verbatim {
        source["verbatim"] = json!(v);
    }
    source
}

fn remember_output(o: RememberOutcome) -> RememberOutput {
    let chars = o.content_chars;
    let has_similar = !o.similar.is_empty();
    RememberOutput {
        memory_id: MemoryId::from_trusted(o.memory_id),
        deduplicated: o.deduplicated.then_some(true),
        scope: o.target.scope,
        hint: has_similar.then(|| {
            "These existing memories look similar. If the new memory replaces one of them, remember it again with links: [{dst: <id>, type: \"supersedes\"}] so the old one retires; if they are the same fact, forget the duplicate.".to_string()
        }),
        similar_existing: has_similar.then_some(o.similar),
        length_directive: (chars > LONG_CONTENT_CHARS).then(|| {
            format!(
                "This memory is {chars} characters. Memories work best as one atomic fact of at most ~{LONG_CONTENT_CHARS} characters: briefings inline about {INLINE_CHARS} characters of a memory and {LOOP_HEADLINE_CHARS} of an open loop. Consider splitting it."
            )
        }),
        anchor_hint: (o.kind == MemoryKind::Decision && !o.entities_named).then(|| {
            "Name the subject of this decision in `entities` (the service, library or component it is about) so later briefings can connect it.".to_string()
        }),
        anchors: (!o.anchors.is_empty()).then_some(o.anchors),
        routed_to_project: o.target.routed_to_project,
        session: o.session,
    }
}

impl Store {
    /// Decide where a `remember` lands (explicit scope → hint → the
    /// session's project: its thread's, else its attachment → refusal),
    /// applying the portability rule. Runs inside the write's transaction:
    /// a project named for the first time is created (and its hint bound)
    /// only by the write that lands in it. `session_scope` is one the
    /// caller still reaches.
    async fn route_write(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        input: &RememberInput,
        session_scope: Option<&str>,
    ) -> Result<Target, ToolError> {
        // The project this session is working in, if any (for the portability rule).
        let session_project = session_scope
            .map(str::to_string)
            .filter(|s| scope::is_shareable(s));
        let session_target = |scope: String, via: &'static str, confidence: f64| Target {
            scope,
            via,
            confidence,
            routed_to_project: None,
        };
        if let Some(spec) = &input.scope {
            return match spec.spec() {
                ScopeSpec::Core | ScopeSpec::Personal => {
                    let core = matches!(spec.spec(), ScopeSpec::Core);
                    self.route_portable(tx, caller, input, core, session_project)
                        .await
                }
                // The caller's own core or personal layer named as a path
                // is that layer: the portability rule applies as to its
                // shorthand.
                ScopeSpec::Path(p)
                    if *p == caller.core_scope() || *p == caller.personal_scope() =>
                {
                    let core = *p == caller.core_scope();
                    self.route_portable(tx, caller, input, core, session_project)
                        .await
                }
                ScopeSpec::Path(p) => {
                    let scope = self.writable_path(tx, caller, p).await?;
                    Ok(session_target(scope, "explicit", 1.0))
                }
                ScopeSpec::All => Err(ToolError::validation("scope \"*\" is for reads only")),
            };
        }
        if let Some(h) = &input.project_hint {
            let scope = self.hint_for_write(tx, caller, h).await?;
            return Ok(session_target(scope, "hint", 0.95));
        }
        if let Some(s) = session_scope {
            // The session's project: created by this first write into it,
            // and refused like any path the caller cannot write.
            let scope = self.writable_path(tx, caller, s).await?;
            return Ok(session_target(scope, "session", 0.9));
        }
        Err(ToolError::validation(Prefix::ScopeTargetRequired.message(
            "this session has no project attached, so a scope-less write has nowhere to go. Do one of: pass project_hint (the repository root path or git remote URL), pass thread (the token from an earlier result's session.thread), or pass scope \"core\" (facts that hold everywhere) / \"personal\" (your preferences).",
        )))
    }

    /// A `core` / `personal` write: kept there when its kind is portable,
    /// else routed to the project it is about (the write's own hint, else
    /// the session's), with a note saying why.
    async fn route_portable(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        input: &RememberInput,
        core: bool,
        session_project: Option<String>,
    ) -> Result<Target, ToolError> {
        let kind = input.kind;
        let allowed = if core {
            kind.is_portable()
        } else {
            kind.is_personal()
        };
        let (scope, via) = if core {
            (caller.core_scope(), "core")
        } else {
            (caller.personal_scope(), "personal")
        };
        // The project a refused kind goes to: the one this write's own hint
        // names (resolved only when needed, so an allowed kind never creates
        // a project), else the session's.
        let project = if allowed {
            None
        } else {
            // Refused there (a reader's project): said as the routing's
            // refusal, not as one of a scope the call never named.
            let layer = if core { "core" } else { "personal" };
            let routed = |e: ToolError| {
                if e.code != zm_contracts::ErrorCode::Forbidden {
                    return e;
                }
                ToolError::forbidden(format!(
                    "A {kind} holds for one project, so a write to {layer} goes to the project this call's project_hint or session names, and you may not write there (your role is reader, or you no longer reach it). Remember it as a fact or reference to keep it in {layer}, or name a project you write to."
                ))
            };
            let by_hint = match &input.project_hint {
                Some(h) => self
                    .bind_hint(tx, caller, h)
                    .await
                    .map_err(routed)?
                    .filter(|s| scope::is_shareable(s)),
                None => None,
            };
            match by_hint {
                Some(p) => Some((p, "hint", 0.95)),
                None => match session_project {
                    Some(p) => Some((
                        self.writable_path(tx, caller, &p).await.map_err(routed)?,
                        "session",
                        0.9,
                    )),
                    None => None,
                },
            }
        };
        let Some((project, via, confidence)) = project else {
            return Ok(Target {
                scope,
                via,
                confidence: 1.0,
                routed_to_project: None,
            });
        };
        let layer = if core { "core" } else { "personal" };
        let note = format!(
            "Stored in the project {project} instead of {layer}: a {kind} is about how THIS project works, so it only holds here. {layer} accepts {}. If it really holds everywhere, rephrase it as a {} and remember it again with scope \"{layer}\".",
            if core {
                "fact, reference and gotcha"
            } else {
                "fact, reference, gotcha and preference"
            },
            if core { "fact" } else { "preference or fact" },
        );
        Ok(Target {
            scope: project,
            via,
            confidence,
            routed_to_project: Some(note),
        })
    }

    /// Store one memory: named steps over the call's one transaction.
    pub(crate) async fn remember(
        &self,
        cx: &mut Cx<'_>,
        input: RememberInput,
    ) -> Result<RememberOutput, ToolError> {
        let caller = cx.caller;
        // 1. The content guard, before anything else happens (no lock held).
        let content = guarded_content(&self.limits, &input)?;
        // 2. The thread the call carries and the session's attachment,
        // while the caller still reaches their projects.
        let (thread, attached) = self.live_pins(caller, input.thread.as_deref()).await?;
        // The pure work, before the transaction takes the write lock.
        let prepared = Prepared::new(&input, &content);
        let edit_of = cx.replaces().cloned();
        let tx = cx.tx().await?;
        // 3. Where it goes.
        let target = self
            .route_write(
                tx,
                caller,
                &input,
                thread.as_ref().map(|t| t.scope.as_str()).or(attached),
            )
            .await?;
        // 4. Links must point at memories the caller can see.
        let links = self.visible_links(tx, caller, &input).await?;
        // 5. Exact dedup in the same scope, else insert.
        let source = provenance(caller, &target, thread.as_ref(), &input);
        let (memory_id, deduplicated) = self
            .insert_or_absorb(
                tx,
                caller,
                (&target.scope, edit_of.as_ref()),
                &input,
                (&content, &prepared.hash),
                &source,
            )
            .await?;
        let written = Written {
            id: &memory_id,
            scope: &target.scope,
        };
        // 6. Entity anchors: as given, or up to three known names in the text.
        let anchors = self
            .anchor_entities(tx, caller, written, &input, &prepared.anchoring)
            .await?;
        // 7. Links; declared supersedes retire their (owned, live) targets.
        let retired = self.apply_links(tx, caller, &memory_id, &links).await?;
        // An edit retires its memory here or writes nothing (the call's
        // transaction rolls back): text identical to it is no change.
        if let Some(old) = &edit_of {
            let old = old.as_str();
            if memory_id != old && !retired.iter().any(|r| r == old) {
                return Err(ToolError::conflict(format!(
                    "Memory {old} was superseded or forgotten meanwhile: edit its newest version."
                )));
            }
            if memory_id != old {
                // A new version is what it replaces but for its text: a
                // memory moved, shared or retyped since the caller read
                // it (the dashboard reads it just before this transaction)
                // is not edited beside where it was: `conflict`, and the
                // caller reads it again.
                let held = sqlx::query("SELECT scope, kind FROM memories WHERE id = $1")
                    .bind(old)
                    .fetch_one(&mut *tx)
                    .await
                    .db("edited memory's place")?;
                let (scope, kind): (String, String) = (col(&held, "scope")?, col(&held, "kind")?);
                if scope != target.scope || kind != input.kind.as_str() {
                    return Err(ToolError::conflict(format!(
                        "Memory {old} was moved or changed meanwhile (it is now a {kind} in {scope}): edit it again where it is now."
                    )));
                }
                self.carry_graph(tx, caller, old, &memory_id).await?;
            }
        }
        // 8. Near-duplicates: candidates to supersede, and an `unjudged`
        // conflict for a same-scope pair that is almost but not exactly equal.
        let similar = if deduplicated {
            Vec::new()
        } else {
            self.near_duplicates(tx, caller, written, &prepared, &retired)
                .await?
        };
        for id in &retired {
            cx.placement_changed(id);
        }
        Ok(remember_output(RememberOutcome {
            memory_id,
            deduplicated,
            target,
            similar,
            anchors,
            content_chars: content.chars().count(),
            kind: input.kind,
            entities_named: input.entities.as_ref().is_some_and(|e| !e.is_empty()),
            session: SessionState {
                attached_project: attached.map(str::to_string),
                thread: thread.map(|t| t.token),
            },
        }))
    }

    /// The write's links, deduplicated; every target must be readable.
    async fn visible_links(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        input: &RememberInput,
    ) -> Result<Vec<(String, MemoryLinkType)>, ToolError> {
        let mut links: Vec<(String, MemoryLinkType)> = Vec::new();
        for l in input.links.iter().flatten() {
            let id = l.dst.as_str().to_string();
            if !links.iter().any(|(d, t)| *d == id && *t == l.link_type) {
                links.push((id, l.link_type));
            }
        }
        // The targets' teams first (PostgreSQL), before this write changes
        // any row: a supersedes retires its target and every link checks
        // the caller's role where its target is shared, which holds those
        // teams. Held only then, after the insert had locked the owner's
        // storage row, a team change waiting on that row deadlocked it.
        // So are the teams a rule on a superseded target is delivered to:
        // the rule's follow-up checks the caller's role there.
        if !links.is_empty() {
            let mut sql = crate::sql::Sql::new("SELECT DISTINCT scope FROM memories WHERE id IN ");
            sql.bind_list(links.iter().map(|(d, _)| d.clone()));
            let rows = sql.query().fetch_all(&mut *tx).await.db("link scopes")?;
            let mut scopes = rows
                .iter()
                .map(|r| col::<String>(r, "scope"))
                .collect::<Result<Vec<_>, _>>()?;
            let superseded: Vec<String> = links
                .iter()
                .filter(|(_, t)| *t == MemoryLinkType::Supersedes)
                .map(|(d, _)| d.clone())
                .collect();
            if !superseded.is_empty() {
                let mut sql = crate::sql::Sql::new(
                    "SELECT DISTINCT applies_scope FROM rules WHERE status = 'promoted' AND applies_scope IS NOT NULL AND owner_id = ",
                );
                sql.bind_str(caller.user_id.clone())
                    .push(" AND memory_id IN ")
                    .bind_list(superseded);
                for r in &sql.query().fetch_all(&mut *tx).await.db("rule scopes")? {
                    scopes.push(col::<String>(r, "applies_scope")?);
                }
            }
            let scopes: Vec<&str> = scopes.iter().map(String::as_str).collect();
            self.hold_teams_of(&mut *tx, &scopes).await?;
        }
        for (dst, _) in &links {
            if !self.can_read_memory(&mut *tx, caller, dst).await? {
                return Err(ToolError::not_found(format!(
                    "links: memory {dst} not found"
                )));
            }
        }
        Ok(links)
    }

    /// On PostgreSQL, take turns with the owner's other writes of new
    /// memories until this transaction ends (an advisory lock on a hash of
    /// the owner): two identical writes at once (a retried call, two
    /// sub-agents) would otherwise each miss the other's uncommitted row
    /// and both insert. One lock per owner, not per content: an import
    /// batch of 500 memories holds one lock, not 500 (the server's lock
    /// table is shared and small), and the owner's inserts queue on their
    /// storage total's row anyway. SQLite's writes take turns already.
    pub(crate) async fn hold_writes_of(
        &self,
        tx: &mut sqlx::AnyConnection,
        owner: &str,
    ) -> Result<(), ToolError> {
        if self.backend != crate::db::Backend::Postgres {
            return Ok(());
        }
        let (class, key) = crate::db::owner_writes_lock(owner);
        sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
            .bind(class)
            .bind(key)
            .execute(&mut *tx)
            .await
            .db("hold the owner's writes")?;
        Ok(())
    }

    /// An edit's new version keeps what the old one was connected to,
    /// which the edit's input does not name: its entities, and the links
    /// the caller drew from it to their own private memories (a link to a
    /// shared memory needs the writer role where it is, checked when a
    /// link is drawn: it is not carried; nor are `supersedes`, which the
    /// old version spent, and `contradicts`, whose conflict stays with the
    /// old version). Both memories are the caller's (the old one retired
    /// by this call).
    async fn carry_graph(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        old: &str,
        new: &str,
    ) -> Result<(), ToolError> {
        sqlx::query(
            "INSERT INTO memory_entities (memory_id, entity_id) SELECT $1, entity_id FROM memory_entities \
             WHERE memory_id = $2 ON CONFLICT DO NOTHING",
        )
        .bind(new)
        .bind(old)
        .execute(&mut *tx)
        .await
        .db("carry entities")?;
        sqlx::query(
            "INSERT INTO memory_links (src, dst, type, owner_id, created_at) \
             SELECT $1, l.dst, l.type, l.owner_id, $3 FROM memory_links l JOIN memories d ON d.id = l.dst \
             WHERE l.src = $2 AND l.owner_id = $4 AND l.type NOT IN ('supersedes', 'contradicts') \
             AND l.dst <> $1 AND d.owner_id = $4 AND d.visibility = 'private' ON CONFLICT DO NOTHING",
        )
        .bind(new)
        .bind(old)
        .bind(self.now())
        .bind(&caller.user_id)
        .execute(&mut *tx)
        .await
        .db("carry links")?;
        Ok(())
    }

    /// The live identical memory in the scope (absorbing the write), or a
    /// new row: `(id, deduplicated)`. `edit_of` is the memory an edit
    /// replaces: a new version of a private memory stays private.
    async fn insert_or_absorb(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        (scope_path, edit_of): (&str, Option<&MemoryId>),
        input: &RememberInput,
        (content, hash): (&str, &str),
        source: &Value,
    ) -> Result<(String, bool), ToolError> {
        self.hold_writes_of(tx, &caller.user_id).await?;
        // Written into a team's scope or a project shared with a team, a
        // memory is the team's to read; elsewhere it stays private until
        // `share` widens it. An edit of a private memory (an import into a
        // shared project) keeps it private: saving a typo fix must not
        // publish it to the team.
        // (Was the edited memory private; had it been kept private?)
        let (edits_private, edits_kept) = match edit_of {
            Some(old) => {
                let was = sqlx::query(
                    "SELECT visibility, kept_private FROM memories WHERE id = $1 AND owner_id = $2",
                )
                .bind(old.as_str())
                .bind(&caller.user_id)
                .fetch_optional(&mut *tx)
                .await
                .db("edited memory's visibility")?;
                match was {
                    Some(r) => (
                        col::<String>(&r, "visibility")? == Visibility::Private.as_str(),
                        col::<i64>(&r, "kept_private")? != 0,
                    ),
                    None => (false, false),
                }
            }
            None => (false, false),
        };
        let team_reads = self.team_reads(tx, scope_path).await?;
        let visibility = if !edits_private && team_reads {
            Visibility::Shared
        } else {
            Visibility::Private
        };
        // Private where a team reads (or a new version of one kept so):
        // kept private on purpose, which no later share of the project
        // publishes.
        let kept_private = edits_private && (team_reads || edits_kept);
        // Only a memory of the same kind absorbs the write: the same words
        // as a `task` are an open loop a `fact` would keep from the loop
        // lists. A private memory (an import into a shared project) does not
        // absorb a write the team is to read: it would keep from the team
        // what the write gives it. A shared one absorbs any repeat (one in
        // a project no longer shared too).
        let existing: Option<String> = sqlx::query_scalar(
            "SELECT id FROM memories WHERE owner_id = $1 AND scope = $2 AND content_hash = $3 AND kind = $5 \
             AND (visibility = $4 OR visibility = 'shared') AND invalidated_at IS NULL ORDER BY seq LIMIT 1",
        )
        .bind(&caller.user_id)
        .bind(scope_path)
        .bind(hash)
        .bind(visibility.as_str())
        .bind(input.kind.as_str())
        .fetch_optional(&mut *tx)
        .await
        .db("dedup probe")?;
        if let Some(id) = existing {
            return Ok((id, true));
        }
        let id = IdKind::Memory.generate();
        sqlx::query(
            "INSERT INTO memories (id, owner_id, scope, kind, content, content_hash, visibility, author_kind, agent_name, source, translation_status, created_at, kept_private) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        )
        .bind(&id)
        .bind(&caller.user_id)
        .bind(scope_path)
        .bind(input.kind.as_str())
        .bind(content)
        .bind(hash)
        .bind(visibility.as_str())
        .bind(caller.author_kind().as_str())
        .bind(caller.agent_name.clone())
        .bind(source.to_string())
        .bind(TranslationStatus::Skipped.as_str())
        .bind(self.now())
        .bind(i64::from(kept_private))
        .execute(&mut *tx)
        .await
        .db("insert memory")?;
        self.check_quota(tx, &caller.user_id).await?;
        Ok((id, false))
    }

    /// Attach the named entities (created in the scope when new), or up to
    /// three entities of the scope whose names occur in the text.
    async fn anchor_entities(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        written: Written<'_>,
        input: &RememberInput,
        anchoring: &Anchoring,
    ) -> Result<Vec<String>, ToolError> {
        let Written {
            id: memory_id,
            scope: scope_path,
        } = written;
        let mut anchors: Vec<String> = Vec::new();
        let text_key = match anchoring {
            Anchoring::Scan(text_key) => text_key,
            Anchoring::Named(named) => {
                let entities = input.entities.iter().flatten();
                for (e, (name, key)) in entities.zip(named) {
                    if !nameable(key) {
                        return Err(ToolError::validation(format!(
                            "entity name {:?} has no letters or digits",
                            e.name
                        )));
                    }
                    let ent_id = self
                        .resolve_entity(
                            tx,
                            EntityRef {
                                owner: &caller.user_id,
                                scope: scope_path,
                                name,
                                key,
                                entity_type: e.entity_type.unwrap_or_default(),
                            },
                            false,
                        )
                        .await?;
                    self.attach_entity(tx, memory_id, &ent_id).await?;
                    if !anchors.contains(name) {
                        anchors.push(name.clone());
                    }
                }
                return Ok(anchors);
            }
        };
        let rows = sqlx::query("SELECT id, name, match_key FROM entities WHERE scope = $1 AND owner_id = $2 ORDER BY created_at, id LIMIT 1000")
            .bind(scope_path)
            .bind(&caller.user_id)
            .fetch_all(&mut *tx)
            .await
            .db("anchor scan")?;
        // The scan runs in the write's turn: it looks at a bounded number
        // of occurrences in all (a text of one letter repeated and a
        // thousand short names would be tens of millions), and the anchors
        // found by then stand.
        let mut budget = ANCHOR_SCAN_OCCURRENCES;
        for e in KnownEntity::from_rows(&rows)? {
            if e.match_key.chars().count() < 3 {
                continue;
            }
            match text_key.names_within(e.match_key.as_str(), &mut budget) {
                Some(true) => {
                    self.attach_entity(tx, memory_id, e.id.as_str()).await?;
                    anchors.push(e.name);
                    if anchors.len() == 3 {
                        break;
                    }
                }
                Some(false) => {}
                None => break,
            }
        }
        Ok(anchors)
    }

    /// Write the links; `supersedes` retires its (owned, live) target.
    /// Returns the retired ids.
    async fn apply_links(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        memory_id: &str,
        links: &[(String, MemoryLinkType)],
    ) -> Result<Vec<String>, ToolError> {
        let now = self.now();
        let mut retired: Vec<String> = Vec::new();
        for (dst, ltype) in links {
            if dst == memory_id {
                continue;
            }
            if *ltype == MemoryLinkType::Supersedes {
                // The old version's teams first (PostgreSQL), as every write
                // into a scope holds them before its rows: a team change
                // handing that memory over waits, or runs first.
                let old = sqlx::query(
                    "SELECT scope, visibility FROM memories WHERE id = $1 AND owner_id = $2",
                )
                .bind(dst)
                .bind(&caller.user_id)
                .fetch_optional(&mut *tx)
                .await
                .db("supersede scope")?;
                let Some(old) = old else {
                    // Not the caller's: nothing to supersede.
                    continue;
                };
                let read_scope: String = col(&old, "scope")?;
                let read_visibility: zm_contracts::Visibility = enum_col(&old, "visibility")?;
                // Retiring a memory its scope's members read takes the
                // writer role there, as a forget of it does (this holds
                // the scope's teams too).
                self.hold_teams_of(&mut *tx, &[&read_scope]).await?;
                self.may_change_own_in(tx, caller, &read_scope, read_visibility)
                    .await?;
                // Then both memories' rows, in id order (PostgreSQL), as a
                // link or a conflict's resolution holds a pair: the new one
                // too, which may be an existing memory the write was
                // absorbed into, so that a `promote_rule` of it (which
                // holds it before inserting its rule) commits before the
                // rule follows below, or waits for this write.
                self.hold_memories(&mut *tx, &[dst.as_str(), memory_id], None)
                    .await?;
                // Read again, held, the role checked where it is now.
                let Some(held) = self
                    .hold_own_rechecked(tx, caller, dst, &read_scope, read_visibility)
                    .await?
                else {
                    continue;
                };
                if held.invalidated_at.is_some() {
                    // Already retired: nothing to supersede.
                    continue;
                }
                let old_scope = held.scope;
                let done = sqlx::query(
                    "UPDATE memories SET invalidated_at = $1, invalidated_by = $2, invalidated_by_agent = $3, superseded_by = $4 \
                     WHERE id = $5 AND owner_id = $2 AND invalidated_at IS NULL",
                )
                .bind(now)
                .bind(&caller.user_id)
                .bind(caller.agent_name.clone())
                .bind(memory_id)
                .bind(dst)
                .execute(&mut *tx)
                .await
                .db("supersede")?;
                if done.rows_affected() == 0 {
                    // Not the caller's, or already retired: nothing to supersede.
                    continue;
                }
                // A rule promoted from the old version follows the new one
                // in the same scope (whose write already took the writer
                // role there), in its state, with the new text when it had
                // the old version's: an edit keeps the rule and corrects
                // it. Into another scope, or onto a memory with a rule of
                // its own (an exact duplicate absorbed), it retires as on
                // a forget: a reader's personal rewrite of a team memory
                // does not rewrite the team's rule. A rule delivered in
                // another scope than the memory's follows only for a
                // caller who may still set rules there (a writer demoted
                // to reader, or the heir of a memory promoted for a team
                // they do not write in, rewrites no team's rule).
                let elsewhere: Option<String> = sqlx::query_scalar(
                    "SELECT applies_scope FROM rules WHERE memory_id = $1 AND owner_id = $2 \
                     AND status = 'promoted' AND layer <> 'user' AND applies_scope <> $3",
                )
                .bind(dst)
                .bind(&caller.user_id)
                .bind(&old_scope)
                .fetch_optional(&mut *tx)
                .await
                .db("rule scope")?;
                // (`visible_links` held that scope's teams, before the
                // insert.)
                let may_follow = match elsewhere {
                    None => true,
                    Some(applies) => self
                        .role_in(&mut *tx, &caller.user_id, &applies)
                        .await?
                        .is_some_and(zm_contracts::TeamRole::can_write),
                };
                let followed = if may_follow {
                    // A rule no longer in force that another user left on
                    // the memory this one follows onto (a giver's revoked
                    // rule on a memory handed over to the caller) is a
                    // record of theirs on a memory no longer theirs: it
                    // gives way, as it does to the owner's `promote_rule`,
                    // instead of revoking the caller's rule. Only one rule
                    // a memory.
                    sqlx::query(
                        "DELETE FROM rules WHERE memory_id = $1 AND owner_id <> $2 AND status <> 'promoted' \
                         AND EXISTS (SELECT 1 FROM rules o WHERE o.memory_id = $3 AND o.owner_id = $2) \
                         AND (SELECT scope FROM memories WHERE id = $1) = $4",
                    )
                    .bind(memory_id)
                    .bind(&caller.user_id)
                    .bind(dst)
                    .bind(&old_scope)
                    .execute(&mut *tx)
                    .await
                    .db("a foreign rule gives way")?;
                    // (The new memory is held, above: a promotion's rule
                    // on it is seen here once committed, never met as a
                    // duplicate.)
                    // A text that was the memory's content (cut to what a
                    // rule may hold) follows the new content, cut alike.
                    let follow = format!(
                        "UPDATE rules SET memory_id = $1, \
                     text = CASE WHEN text = substr((SELECT content FROM memories WHERE id = $2), 1, {0}) \
                                 THEN substr((SELECT content FROM memories WHERE id = $1), 1, {0}) ELSE text END \
                     WHERE memory_id = $2 AND owner_id = $3 \
                       AND (SELECT scope FROM memories WHERE id = $1) = $4 \
                       AND NOT EXISTS (SELECT 1 FROM rules r WHERE r.memory_id = $1)",
                        zm_contracts::MAX_RULE_TEXT
                    );
                    sqlx::query(sqlx::AssertSqlSafe(follow))
                        .bind(memory_id)
                        .bind(dst)
                        .bind(&caller.user_id)
                        .bind(&old_scope)
                        .execute(&mut *tx)
                        .await
                        .db("rule follows its memory")?
                        .rows_affected()
                        > 0
                } else {
                    false
                };
                if !followed {
                    self.retire_rule_of(tx, &caller.user_id, dst).await?;
                }
                retired.push(dst.clone());
            } else {
                // The new memory's end was written where the caller may
                // write; the target's is checked as `link` checks both.
                self.may_link_to(tx, caller, dst).await?;
            }
            let created = sqlx::query(
                "INSERT INTO memory_links (src, dst, type, owner_id, created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (src, dst, type) DO NOTHING",
            )
            .bind(memory_id)
            .bind(dst)
            .bind(ltype.as_str())
            .bind(&caller.user_id)
            .bind(now)
            .execute(&mut *tx)
            .await
            .db("memory link")?
            .rows_affected()
                == 1;
            // Declared while writing, a contradiction goes to review as
            // one declared with `link` does.
            if *ltype == MemoryLinkType::Contradicts {
                self.file_contradiction(&mut *tx, caller, (memory_id, dst), created, now)
                    .await?;
            }
        }
        Ok(retired)
    }

    /// Near-duplicates of a new memory, best first; a same-scope pair close
    /// enough files an `unjudged` conflict for the owner to judge.
    async fn near_duplicates(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        written: Written<'_>,
        prepared: &Prepared,
        retired: &[String],
    ) -> Result<Vec<SimilarMemory>, ToolError> {
        let Written {
            id: memory_id,
            scope: scope_path,
        } = written;
        let now = self.now();
        // Other projects' memories are left out by the probe itself (they
        // would otherwise take the candidates' places, and the report's).
        let candidates = self
            .similar_candidates(
                tx,
                &caller.user_id,
                (memory_id, scope_path),
                &prepared.probe,
            )
            .await?;
        let texts: Vec<(usize, &str)> = candidates
            .iter()
            .enumerate()
            .map(|(i, c)| (i, c.content.as_str()))
            .collect();
        let mut similar = Vec::new();
        // Every candidate is ranked and what is not reported is dropped
        // before the report is cut to its cap, so a memory left out never
        // takes the place of one that is reported.
        let ranked = similarity::rank_similar_tokens(
            &prepared.tokens,
            &texts,
            similarity::SIMILAR_FLOOR,
            texts.len(),
        );
        for (i, score) in ranked
            .into_iter()
            .filter(|&(i, _)| {
                let c = &candidates[i];
                !retired.iter().any(|r| r == c.id.as_str())
            })
            .take(similarity::SIMILAR_CAP)
        {
            let c = &candidates[i];
            // The same words as another kind (a task beside a fact) are
            // listed, but there is nothing to judge between them.
            if score >= similarity::UNJUDGED_FLOOR
                && c.scope == scope_path
                && content_hash(&c.content) != prepared.hash
            {
                crate::conflicts::file_unjudged(&mut *tx, (memory_id, c.id.as_str()), None, now)
                    .await?;
            }
            similar.push(SimilarMemory {
                id: c.id.clone(),
                kind: c.kind,
                age_days: u32::try_from((now - c.created_at).max(0) / DAY_MS).unwrap_or(u32::MAX),
                similarity: (score * 1000.0).round() / 1000.0,
                content: similarity::preview(&c.content, 200),
            });
        }
        Ok(similar)
    }

    /// Live memories of the owner that share words with the new memory:
    /// of `probe` (its longest terms, [`Prepared::probe`]) the rarest in the
    /// store are searched, and a candidate holds at least half of them
    /// ([`probe_match`]).
    async fn similar_candidates(
        &self,
        tx: &mut sqlx::AnyConnection,
        owner: &str,
        (exclude, scope_path): (&str, &str),
        probe: &str,
    ) -> Result<Vec<crate::search::Candidate>, ToolError> {
        let terms = crate::fts::query_terms(probe);
        let df = match crate::search::document_frequencies_sql(self.backend, &terms, PROBE_BUDGET) {
            crate::search::Frequencies::Known(Some(sql)) => {
                let row = sql
                    .query()
                    .fetch_one(&mut *tx)
                    .await
                    .db("document frequencies")?;
                crate::search::document_frequencies_of(&row, terms.len())?
            }
            crate::search::Frequencies::Known(None) => return Ok(Vec::new()),
            crate::search::Frequencies::Unknown(df) => df,
        };
        let (probe, rare) = probe_terms(&terms, &df);
        let probe = crate::fts::query_terms(&probe);
        let sql = if rare {
            // Memories sharing the most of the rare words, newest first.
            let Some(mut sql) = crate::search::shared_words_select(
                self.backend,
                &probe,
                probe_match(probe.len()),
                crate::search::FULL_CANDIDATE_COLUMNS,
                owner,
            ) else {
                return Ok(Vec::new());
            };
            push_probe_filter(&mut sql, owner, exclude, scope_path);
            sql.push(" ORDER BY g.hits DESC, m.seq DESC LIMIT ")
                .bind_i64(SIMILAR_FETCH);
            sql
        } else {
            // Common words only: the newest memories holding the rarest
            // (a writer who owns few of a shared file's memories has the
            // match narrowed to theirs inside the full-text index).
            let tenant = self.own_fts_tenant(&mut *tx, owner).await?;
            let Some(mut sql) = crate::search::fts_select(
                self.backend,
                &probe.join(" "),
                crate::fts::Match::All,
                crate::search::FULL_CANDIDATE_COLUMNS,
                tenant.as_deref(),
            ) else {
                return Ok(Vec::new());
            };
            sql.push(" AND ");
            push_probe_filter(&mut sql, owner, exclude, scope_path);
            crate::search::fts_newest(self.backend, &mut sql, SIMILAR_FETCH);
            sql
        };
        let rows = sql
            .query()
            .fetch_all(&mut *tx)
            .await
            .db("similar candidates")?;
        crate::search::Candidate::from_rows(&rows)
    }

    /// Resolve (or create) an entity in a scope by match key; with
    /// `any_type`, an entity of that name of any type matches.
    pub(crate) async fn resolve_entity(
        &self,
        tx: &mut sqlx::AnyConnection,
        e: EntityRef<'_>,
        any_type: bool,
    ) -> Result<String, ToolError> {
        let found: Option<String> = if any_type {
            sqlx::query_scalar("SELECT id FROM entities WHERE scope = $1 AND match_key = $2 ORDER BY created_at, id LIMIT 1")
                .bind(e.scope)
                .bind(e.key)
                .fetch_optional(&mut *tx)
                .await
                .db("entity lookup")?
        } else {
            sqlx::query_scalar(
                "SELECT id FROM entities WHERE scope = $1 AND match_key = $2 AND type = $3",
            )
            .bind(e.scope)
            .bind(e.key)
            .bind(e.entity_type.as_str())
            .fetch_optional(&mut *tx)
            .await
            .db("entity lookup")?
        };
        if let Some(id) = found {
            return Ok(id);
        }
        let id = IdKind::Entity.generate();
        // Two writes naming the same new entity at once (PostgreSQL): the
        // second finds the first's row instead of failing on the unique
        // (scope, match_key, type).
        let inserted = sqlx::query("INSERT INTO entities (id, owner_id, scope, name, match_key, type, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (scope, match_key, type) DO NOTHING")
            .bind(&id)
            .bind(e.owner)
            .bind(e.scope)
            .bind(e.name)
            .bind(e.key)
            .bind(e.entity_type.as_str())
            .bind(self.now())
            .execute(&mut *tx)
            .await
            .db("entity insert")?;
        if inserted.rows_affected() == 0 {
            return sqlx::query_scalar(
                "SELECT id FROM entities WHERE scope = $1 AND match_key = $2 AND type = $3",
            )
            .bind(e.scope)
            .bind(e.key)
            .bind(e.entity_type.as_str())
            .fetch_one(&mut *tx)
            .await
            .db("entity lookup");
        }
        Ok(id)
    }

    async fn attach_entity(
        &self,
        tx: &mut sqlx::AnyConnection,
        memory: &str,
        entity: &str,
    ) -> Result<(), ToolError> {
        sqlx::query("INSERT INTO memory_entities (memory_id, entity_id) VALUES ($1, $2) ON CONFLICT (memory_id, entity_id) DO NOTHING")
            .bind(memory)
            .bind(entity)
            .execute(&mut *tx)
            .await
            .db("attach entity")?;
        Ok(())
    }

    /// May the caller link memory `id` (one they can read) to another? A
    /// link shows in the recall and briefings of everyone who reads both
    /// ends, so linking a memory others read changes what they read: the
    /// writer role where it is shared, as any other change of it takes
    /// (`may_change_own_in`; a reader links only what stays their own).
    /// `link` checks both ends, `remember`'s `links` the target.
    pub(crate) async fn may_link_to(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        id: &str,
    ) -> Result<(), ToolError> {
        let placed = sqlx::query("SELECT scope, visibility FROM memories WHERE id = $1")
            .bind(id)
            .fetch_one(&mut *tx)
            .await
            .db("link end")?;
        let scope: String = col(&placed, "scope")?;
        self.may_change_own_in(tx, caller, &scope, enum_col(&placed, "visibility")?)
            .await
    }

    /// Can the caller read this memory (own, or shared into a scope they belong to)?
    pub(crate) async fn can_read_memory<'e, E>(
        &self,
        exec: E,
        caller: &Caller,
        id: &str,
    ) -> Result<bool, ToolError>
    where
        E: sqlx::Executor<'e, Database = sqlx::Any>,
    {
        let mut sql = crate::sql::Sql::new("SELECT COUNT(*) AS n FROM memories m WHERE m.id = ");
        sql.bind_str(id).push(" AND ");
        crate::scopes::push_visible(&mut sql, "m", &caller.user_id);
        let row = sql.query().fetch_one(exec).await.db("can read")?;
        Ok(col::<i64>(&row, "n")? > 0)
    }

    /// Hold the teams of memories `ids` (with `owner`, of that user's
    /// only), in one statement in team order ([`Store::hold_teams_of`]):
    /// what a write touching memories of several teams takes before their
    /// rows. Nothing on SQLite, whose writes take turns.
    pub(crate) async fn hold_teams_of_memories(
        &self,
        tx: &mut sqlx::AnyConnection,
        ids: &[&str],
        owner: Option<&str>,
    ) -> Result<(), ToolError> {
        if self.backend != crate::db::Backend::Postgres {
            return Ok(());
        }
        let mut sql = crate::sql::Sql::new("SELECT scope FROM memories WHERE id IN ");
        sql.bind_list(ids.iter().copied());
        if let Some(owner) = owner {
            sql.push(" AND owner_id = ").bind_str(owner);
        }
        let rows = sql
            .query()
            .fetch_all(&mut *tx)
            .await
            .db("memories' scopes")?;
        let scopes: Vec<String> = rows
            .iter()
            .map(|r| col(r, "scope"))
            .collect::<Result<_, _>>()?;
        let paths: Vec<&str> = scopes.iter().map(String::as_str).collect();
        self.hold_teams_of(tx, &paths).await
    }

    /// Hold the rows of memories `ids` (PostgreSQL: `FOR NO KEY UPDATE`,
    /// in id order, the order every write holding two memories takes, so
    /// two such writes queue instead of deadlocking); with `owner`, only
    /// that user's. Answers how many rows there are. Take the memories'
    /// teams first (`hold_teams_of`).
    pub(crate) async fn hold_memories(
        &self,
        tx: &mut sqlx::AnyConnection,
        ids: &[&str],
        owner: Option<&str>,
    ) -> Result<usize, ToolError> {
        let mut sql = crate::sql::Sql::new("SELECT id FROM memories WHERE id IN ");
        sql.bind_list(ids.iter().copied());
        if let Some(owner) = owner {
            sql.push(" AND owner_id = ").bind_str(owner);
        }
        sql.push(" ORDER BY id").push(self.backend.hold_rows());
        let rows = sql.query().fetch_all(&mut *tx).await.db("hold memories")?;
        Ok(rows.len())
    }

    /// Whether memory `id` is still the caller's and live, read in `tx`
    /// and on PostgreSQL held (`FOR NO KEY UPDATE`) to its end: `None` when
    /// it is not the caller's (any more), else its `invalidated_at`. Take
    /// the memory's teams first (`hold_teams_of`), the order every write
    /// takes.
    pub(crate) async fn hold_own_memory(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        id: &str,
    ) -> Result<Option<Option<i64>>, ToolError> {
        Ok(self
            .hold_memory_of(tx, &caller.user_id, id)
            .await?
            .map(|m| m.invalidated_at))
    }

    /// Memory `id` as it is now, still `owner`'s, held like
    /// [`Store::hold_own_memory`]; `None` when it is not theirs (any more).
    pub(crate) async fn hold_memory_of(
        &self,
        tx: &mut sqlx::AnyConnection,
        owner: &str,
        id: &str,
    ) -> Result<Option<OwnedMemory>, ToolError> {
        let mut sql = crate::sql::Sql::new(
            "SELECT owner_id, kind, scope, visibility, invalidated_at FROM memories WHERE id = ",
        );
        sql.bind_str(id)
            .push(" AND owner_id = ")
            .bind_str(owner)
            .push(self.backend.hold_rows());
        let row = sql
            .query()
            .fetch_optional(&mut *tx)
            .await
            .db("hold memory")?;
        row.as_ref().map(OwnedMemory::from_row).transpose()
    }

    /// The caller's own memory `id`, held, whose role was checked where a
    /// first read found it (`read_scope`, `read_visibility`). On PostgreSQL
    /// a share or a move may have committed since that read: the role that
    /// counts is the one where the memory is now, checked again when it
    /// moved (this holds its team's row after the memory's, against the
    /// usual order: a hand-over waiting the other way is a deadlock, which
    /// the service runs again). `None` when it is not the caller's any more.
    pub(crate) async fn hold_own_rechecked(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        id: &str,
        read_scope: &str,
        read_visibility: zm_contracts::Visibility,
    ) -> Result<Option<OwnedMemory>, ToolError> {
        let Some(held) = self.hold_memory_of(tx, &caller.user_id, id).await? else {
            return Ok(None);
        };
        if held.scope != read_scope || held.visibility != read_visibility {
            self.may_change_own_in(tx, caller, &held.scope, held.visibility)
                .await?;
        }
        Ok(Some(held))
    }

    /// Load a memory the caller may change for a lifecycle change (forget,
    /// close, restore). Their own: one the members of its scope read takes
    /// the writer role there (`may_change_own_in`), and is then held and
    /// read again, still the caller's (on PostgreSQL a hand-over may have
    /// committed meanwhile). Another account's: only a shared one a team's
    /// steward holds in that team's scopes, for the team's admin
    /// (`act_for_steward`, which holds the team's row first, then the
    /// memory's is held and read again, still the steward's, in that scope
    /// and shared); the team's writers and readers are `forbidden`, and
    /// anything else reads as not found, as a foreign id does.
    async fn owned(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        id: &str,
    ) -> Result<OwnedMemory, ToolError> {
        let row = sqlx::query(
            "SELECT owner_id, kind, scope, visibility, invalidated_at FROM memories WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await
        .db("load memory")?;
        let not_found = || ToolError::not_found(format!("Memory {id} not found."));
        let mut memory = match row {
            Some(r) => OwnedMemory::from_row(&r)?,
            None => return Err(not_found()),
        };
        if memory.owner_id == caller.user_id {
            self.may_change_own_in(tx, caller, &memory.scope, memory.visibility)
                .await?;
            return self
                .hold_own_rechecked(tx, caller, id, &memory.scope, memory.visibility)
                .await?
                .ok_or_else(not_found);
        }
        // What a team's members read and its steward holds: the team's
        // admins change it for the steward. A private row is its owner's
        // alone, whoever holds it.
        if memory.visibility != zm_contracts::Visibility::Shared {
            return Err(not_found());
        }
        let team = self
            .act_for_steward(
                tx,
                caller,
                &memory.owner_id,
                &memory.scope,
                "Changing a memory a departed member left to the team",
                not_found,
            )
            .await?;
        let held = self
            .hold_memory_of(tx, &memory.owner_id, id)
            .await?
            .ok_or_else(not_found)?;
        if held.scope != memory.scope || held.visibility != zm_contracts::Visibility::Shared {
            return Err(not_found());
        }
        memory.invalidated_at = held.invalidated_at;
        memory.for_team = Some(team);
        Ok(memory)
    }

    /// Invalidate memory `id` of `owner` (the caller, or the steward the
    /// caller acts for), as the caller.
    async fn invalidate(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        owner: &str,
        id: &str,
    ) -> Result<(), ToolError> {
        sqlx::query("UPDATE memories SET invalidated_at = $1, invalidated_by = $2, invalidated_by_agent = $3 WHERE id = $4 AND invalidated_at IS NULL")
            .bind(self.now())
            .bind(&caller.user_id)
            .bind(caller.agent_name.clone())
            .bind(id)
            .execute(&mut *tx)
            .await
            .db("invalidate")?;
        // A rule promoted from the memory goes with it: the briefing stops
        // delivering it (restore_memory does not re-promote it).
        self.retire_rule_of(tx, owner, id).await
    }

    /// Invalidate a memory (add-only: it leaves search, nothing is deleted).
    pub(crate) async fn forget(
        &self,
        cx: &mut Cx<'_>,
        input: ForgetInput,
    ) -> Result<ForgetOutput, ToolError> {
        let caller = cx.caller;
        let id = input.memory_id.as_str();
        let tx = cx.tx().await?;
        let memory = self.owned(tx, caller, id).await?;
        if memory.invalidated_at.is_some() {
            return Err(ToolError::conflict(format!(
                "Memory {id} is already invalidated; restore_memory brings it back."
            )));
        }
        self.invalidate(tx, caller, &memory.owner_id, id).await?;
        memory
            .record_for_team(self, tx, caller, TeamAction::StewardMemoryForgotten, id)
            .await?;
        cx.placement_changed(id);
        Ok(ForgetOutput {
            memory_id: input.memory_id,
            invalidated: true,
        })
    }

    /// Close an open loop (task / open-question).
    pub(crate) async fn close_loop(
        &self,
        cx: &mut Cx<'_>,
        input: CloseLoopInput,
    ) -> Result<CloseLoopOutput, ToolError> {
        let caller = cx.caller;
        let id = input.memory_id.as_str();
        let tx = cx.tx().await?;
        let memory = self.owned(tx, caller, id).await?;
        let kind = memory.kind;
        if !kind.is_loop() {
            return Err(ToolError::validation(format!(
                "Memory {id} is a {kind}, not an open loop (task or open-question); use forget to invalidate it."
            ))
            .with_details(json!({"fields": [{"path": "memory_id", "reason": format!("is a {kind}, not a task or open-question")}]})));
        }
        if memory.invalidated_at.is_some() {
            return Err(ToolError::conflict(format!(
                "Memory {id} is already closed or invalidated."
            )));
        }
        self.invalidate(tx, caller, &memory.owner_id, id).await?;
        memory
            .record_for_team(self, tx, caller, TeamAction::StewardMemoryClosed, id)
            .await?;
        cx.placement_changed(id);
        Ok(CloseLoopOutput {
            memory_id: input.memory_id,
            closed: true,
        })
    }

    /// Undo an invalidation (the owner, or for a team's steward the
    /// team's admins).
    pub(crate) async fn restore_memory(
        &self,
        cx: &mut Cx<'_>,
        input: RestoreMemoryInput,
    ) -> Result<RestoreMemoryOutput, ToolError> {
        let caller = cx.caller;
        let id = input.memory_id.as_str();
        let tx = cx.tx().await?;
        let memory = self.owned(tx, caller, id).await?;
        if memory.invalidated_at.is_none() {
            return Err(ToolError::conflict(format!(
                "Memory {id} is not invalidated."
            )));
        }
        // Restoring drops the memory's owner's `supersedes` links that
        // point at it (a teammate's `link` is theirs, and stays). A team's
        // admin restoring for the steward never undoes an edit: a memory
        // superseded by a newer version (its departed author's, handed to
        // the steward with it, or one its author kept) is not theirs to
        // bring back beside it.
        if memory.owner_id != caller.user_id {
            let others: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM memories m WHERE m.id = $1 AND m.superseded_by IS NOT NULL",
            )
            .bind(id)
            .fetch_one(&mut *tx)
            .await
            .db("superseding links")?;
            if others > 0 {
                return Err(ToolError::conflict(format!(
                    "Memory {id} was superseded by a newer version; a team's admins restore only what was forgotten or closed."
                )));
            }
        }
        sqlx::query(
            "UPDATE memories SET invalidated_at = NULL, invalidated_by = NULL, invalidated_by_agent = NULL, superseded_by = NULL WHERE id = $1",
        )
        .bind(id)
        .execute(&mut *tx)
        .await
        .db("restore")?;
        sqlx::query(
            "DELETE FROM memory_links WHERE dst = $1 AND type = 'supersedes' AND owner_id = $2",
        )
        .bind(id)
        .bind(&memory.owner_id)
        .execute(&mut *tx)
        .await
        .db("restore links")?;
        memory
            .record_for_team(self, tx, caller, TeamAction::StewardMemoryRestored, id)
            .await?;
        cx.placement_changed(id);
        Ok(RestoreMemoryOutput {
            memory_id: input.memory_id,
            restored: true,
        })
    }

    /// One memory, full fidelity, if the caller can read it.
    pub async fn get_memory(&self, caller: &Caller, id: &MemoryId) -> Result<Memory, ToolError> {
        let mut sql = crate::sql::Sql::new(&format!(
            "SELECT {} FROM memories m WHERE m.id = ",
            crate::search::MEMORY_COLUMNS
        ));
        sql.bind_str(id.as_str()).push(" AND ");
        crate::scopes::push_visible(&mut sql, "m", &caller.user_id);
        let row = sql
            .query()
            .fetch_optional(&self.pool)
            .await
            .db("get memory")?;
        let Some(row) = row else {
            return Err(ToolError::not_found(format!("Memory {id} not found.")));
        };
        self.memories_served_to(caller, std::slice::from_ref(&row))
            .await?
            .pop()
            .ok_or_else(ToolError::internal)
    }

    /// Full memory rows ([`MEMORY_COLUMNS`](crate::search::MEMORY_COLUMNS))
    /// as `caller` is served them, by `get_memory`, an export or the
    /// dashboard: the writer's session provenance is the owner's alone
    /// ([`WRITER_SESSION_KEYS`]), and a successor the caller cannot read is
    /// not named ([`hide_unreadable_successors`](Self::hide_unreadable_successors)).
    pub(crate) async fn memories_served_to(
        &self,
        caller: &Caller,
        rows: &[sqlx::any::AnyRow],
    ) -> Result<Vec<Memory>, ToolError> {
        let mut memories = Vec::with_capacity(rows.len());
        for r in rows {
            let mut m = Memory::from_row(r)?;
            if col::<String>(r, "owner_id")? != caller.user_id {
                strip_writer_session(&mut m.source);
            }
            memories.push(m);
        }
        self.hide_unreadable_successors(caller, &mut memories)
            .await?;
        Ok(memories)
    }

    /// Leave out the successor a memory names when the caller cannot read
    /// it (a writer superseded a team memory with a private one, or the
    /// successor's author left the team): what a result names, the caller
    /// can open. One query for the whole page.
    pub(crate) async fn hide_unreadable_successors(
        &self,
        caller: &Caller,
        memories: &mut [Memory],
    ) -> Result<(), ToolError> {
        let mut named: Vec<&str> = memories
            .iter()
            .filter_map(|m| m.superseded_by.as_ref().map(MemoryId::as_str))
            .collect();
        named.sort_unstable();
        named.dedup();
        if named.is_empty() {
            return Ok(());
        }
        // In chunks: a team's export may name more successors than one
        // statement may bind (SQLite 32,766, PostgreSQL 65,535).
        let mut readable = std::collections::HashSet::new();
        for chunk in named.chunks(SUCCESSORS_PER_QUERY) {
            let mut sql = crate::sql::Sql::new("SELECT m.id AS id FROM memories m WHERE m.id IN ");
            sql.bind_list(chunk.iter().copied()).push(" AND ");
            crate::scopes::push_visible(&mut sql, "m", &caller.user_id);
            for r in sql
                .query()
                .fetch_all(&self.pool)
                .await
                .db("readable successors")?
            {
                readable.insert(col::<String>(&r, "id")?);
            }
        }
        for m in memories.iter_mut() {
            if m.superseded_by
                .as_ref()
                .is_some_and(|s| !readable.contains(s.as_str()))
            {
                m.superseded_by = None;
            }
        }
        Ok(())
    }
}

/// The near-duplicate probe's terms: the rarest of `terms` in the store
/// (ties: the longer first), at most [`SIMILAR_PROBE_TERMS`], joined in
/// text order, and whether they are rare — their frequencies sum to at most
/// [`PROBE_BUDGET`], so listing their holders is cheap. A text of common
/// words only is probed with its [`SIMILAR_COMMON_TERMS`] rarest (`false`).
fn probe_terms(terms: &[String], df: &[i64]) -> (String, bool) {
    let n = SIMILAR_PROBE_TERMS;
    // A word no memory holds (or a stop word, on PostgreSQL) finds nothing.
    let mut order: Vec<usize> = (0..terms.len()).filter(|&i| df[i] > 0).collect();
    order.sort_by(|&a, &b| {
        df[a]
            .cmp(&df[b])
            .then(terms[b].chars().count().cmp(&terms[a].chars().count()))
            .then(a.cmp(&b))
    });
    let mut sum = 0i64;
    let rare = order
        .iter()
        .take(n)
        .take_while(|&&i| {
            sum = sum.saturating_add(df[i]);
            sum <= PROBE_BUDGET
        })
        .count();
    let (mut kept, is_rare) = if rare > 0 {
        (order[..rare].to_vec(), true)
    } else {
        (
            order.into_iter().take(SIMILAR_COMMON_TERMS).collect(),
            false,
        )
    };
    kept.sort_unstable();
    let text = kept
        .into_iter()
        .map(|i| terms[i].as_str())
        .collect::<Vec<_>>()
        .join(" ");
    (text, is_rare)
}

/// How many of the probe's `n` terms a candidate holds: at least half (all
/// of one or two). A text close enough to be a near-duplicate (TF-IDF
/// cosine ≥ 0.80) shares most of its rarest words; a memory that merely
/// shares one word is not read — on a large store, thousands would be, in
/// the write lock.
fn probe_match(n: usize) -> usize {
    if n <= 2 { n } else { n.div_ceil(2) }
}

/// The probe's conditions on `m`: the owner's live memories but the new one,
/// less those of another project than the new one's `scope_path` (a memory
/// in a project or team scope is not compared with one in another; a
/// personal scope is compared with every scope).
fn push_probe_filter(sql: &mut crate::sql::Sql, owner: &str, exclude: &str, scope_path: &str) {
    sql.push("m.owner_id = ").bind_str(owner);
    sql.push(" AND m.invalidated_at IS NULL AND m.id <> ")
        .bind_str(exclude);
    if scope::is_shareable(scope_path) {
        // `is_shareable` is a prefix test: `proj.` or `team.`.
        sql.push(" AND (m.scope = ")
            .bind_str(scope_path)
            .push(" OR substr(m.scope, 1, 5) NOT IN ('proj.', 'team.'))");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(raw: &Value) -> RememberInput {
        zm_contracts::parse_input::<RememberInput>(raw).expect("valid input")
    }

    #[test]
    fn the_probe_keeps_the_rarest_terms_in_text_order() {
        let terms: Vec<String> = [
            "service",
            "zebrafish",
            "deploy",
            "ledger",
            "the",
            "sync",
            "alpha",
            "beta",
        ]
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
        let c = PROBE_BUDGET + 1;
        // Rare words only, in text order; the common ones are left out, and
        // so is a word no memory holds.
        assert_eq!(
            probe_terms(&terms, &[c, 1, 40, 1, c, c, c, c]),
            ("zebrafish deploy ledger".to_string(), true)
        );
        assert_eq!(
            probe_terms(&terms, &[c, 1, 0, 1, c, c, c, c]),
            ("zebrafish ledger".to_string(), true)
        );
        // At most six, the rarest; ties: the longer first.
        assert_eq!(
            probe_terms(&terms, &[5; 8]),
            (
                "service zebrafish deploy ledger sync alpha".to_string(),
                true
            )
        );
        // Rare words whose frequencies pass the budget together: the rarest.
        assert_eq!(
            probe_terms(&terms, &[c, 300, 250, c, c, c, c, c]),
            ("deploy".to_string(), true)
        );
        // Only common words: the three rarest, which a candidate must all hold.
        assert_eq!(
            probe_terms(
                &terms,
                &[c + 9, c + 1, c + 2, c, c + 9, c + 9, c + 9, c + 9]
            ),
            ("zebrafish deploy ledger".to_string(), false)
        );
        assert_eq!(probe_match(1), 1);
        assert_eq!(probe_match(2), 2);
        assert_eq!(probe_match(5), 3);
        assert_eq!(probe_match(6), 3);
    }

    /// A name is found as a run of whole words, not inside one.
    #[test]
    fn a_known_name_is_found_only_as_whole_words() {
        let text = ScanText::new(
            "Every channel has a planning doc; the cache we shared is stale. We moved zero-memory and C++, (Node.js) to Ledgerdb.",
        );
        for (name, found) in [
            ("ann", false),
            ("eve", false),
            ("redis", false),
            ("plan", false),
            ("every", true),
            ("planningdoc", true),
            ("zeromemory", true),
            ("c++", true),
            ("node.js", true),
            ("ledgerdb", true),
            ("ledger", false),
            ("", false),
        ] {
            assert_eq!(text.names(name), found, "{name}");
        }
        // Scripts without spaces: a name beside their letters is a word.
        let cjk = ScanText::new("我们把缓存迁移到了Redis上。我住在东京都附近。");
        assert!(cjk.names("redis") && cjk.names("东京都"));
        // An occurrence inside a word does not hide a later, overlapping
        // whole one.
        assert!(ScanText::new("xab abab").names("abab"));
        assert!(!ScanText::new("xababab").names("abab"));
        // Every occurrence looked at is counted against the budget.
        let repeated = ScanText::new(&"a".repeat(1_000));
        let mut budget = 10;
        assert_eq!(repeated.names_within("aaa", &mut budget), None);
        assert_eq!(budget, 0);
        let mut budget = 1_000;
        assert_eq!(repeated.names_within("aaa", &mut budget), Some(false));
        assert_eq!(budget, 1_000 - 998, "998 places hold it, none a word");
        let mut budget = 5;
        assert_eq!(
            repeated.names_within("a".repeat(1_000).as_str(), &mut budget),
            Some(true)
        );
        assert_eq!(budget, 4);
    }

    /// Everything `remember` derives from its text alone is computed before
    /// the transaction, from the same functions as before.
    #[test]
    fn prepared_holds_the_pure_work_of_a_remember() {
        let content = "The Staging database runs PostgreSQL sixteen with pgvector";
        let p = Prepared::new(&input(&json!({ "content": content })), content);
        assert_eq!(p.hash, content_hash(content));
        assert_eq!(p.tokens, similarity::tokenize(content));
        assert_eq!(
            p.probe,
            crate::fts::distinctive_terms(content, SIMILAR_PROBE_POOL)
        );
        match &p.anchoring {
            Anchoring::Scan(scan) => assert_eq!(scan.key, match_key(content)),
            Anchoring::Named(_) => panic!("no entities named: a scan"),
        }

        let named = input(&json!({
            "content": content,
            "entities": [{ "name": "  Staging   DB " }, { "name": "--" }],
        }));
        match Prepared::new(&named, content).anchoring {
            Anchoring::Named(keys) => assert_eq!(
                keys,
                vec![
                    (
                        display_name("  Staging   DB "),
                        match_key(&display_name("  Staging   DB "))
                    ),
                    (display_name("--"), String::new()),
                ]
            ),
            Anchoring::Scan(_) => panic!("entities named"),
        }
    }
}
