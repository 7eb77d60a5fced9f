//! Importing files: our JSONL export, and the JSONL file of the official
//! `@modelcontextprotocol/server-memory` — one importer for the command line
//! (`zero-memory import`) and the dashboard's Account page.
//!
//! Every memory goes through the `import_memory` tool with a deterministic
//! `source_hash`, so running the same import twice adds nothing the second
//! time. The mapping of the server-memory graph is documented in
//! `docs/CLI.md`:
//!
//! - each observation → one `fact` memory `"<name>: <observation>"` (the
//!   observation as written when it already names the entity), idempotency
//!   key sha256(`name|observation`); then anchored to its entity, with the
//!   entity type mapped to ours, by a `remember` of the identical content
//!   in the same scope (which deduplicates onto the imported memory and
//!   creates/attaches the typed entity);
//! - an entity without observations → one memory `"<name> is a <entityType>."`,
//!   anchored the same way, so the entity and its type exist;
//! - each relation → a `link` entity edge (our edge type when the relation
//!   type is one after normalisation, else `relates_to`); a relation type
//!   that is not ours is kept as a memory `"<from> <relation words> <to>."`
//!   anchored to both entities, so nothing of the file is lost.

use std::collections::HashMap;

use crate::memories::match_key;
use crate::service::{Handler, ToolService};
use crate::store::Caller;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use zm_contracts::catalogue::tool;
use zm_contracts::{
    EdgeType, EntityType, ErrorCode, ImportMemoryOutput, ImportTarget, Memory, MemoryId,
    MemoryKind, RememberOutput, ToolError, parse_input, scope,
};

/// The file formats the importer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportFormat {
    /// Our JSONL export (one `Memory` a line).
    Zm,
    /// The JSONL file of `@modelcontextprotocol/server-memory`.
    ServerMemory,
}

/// Where imported memories go when the file does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportInto {
    Core,
    Personal,
}

/// A failure as one line: the message and the offending fields.
pub fn describe(e: &ToolError) -> String {
    let mut s = e.message.clone();
    if let Some(fields) = e
        .details
        .as_ref()
        .and_then(|d| d.get("fields"))
        .and_then(|f| f.as_array())
    {
        let parts: Vec<String> = fields
            .iter()
            .map(|f| {
                format!(
                    "{}: {}",
                    f["path"].as_str().unwrap_or("?"),
                    f["reason"].as_str().unwrap_or("")
                )
            })
            .collect();
        if !parts.is_empty() {
            s.push_str(&format!(" ({})", parts.join("; ")));
        }
    }
    s
}

/// Import `text` as `format` for `caller`, through the tool service (each
/// memory with a deterministic `source_hash`: importing the same file twice
/// adds nothing the second time). `source_path` names the file in each
/// memory's provenance.
pub async fn import_text(
    tools: ToolService,
    caller: Caller,
    source_path: String,
    format: ImportFormat,
    target: Option<ImportInto>,
    text: impl AsRef<str>,
) -> Summary {
    import_reader(
        tools,
        caller,
        source_path,
        format,
        target,
        text.as_ref().as_bytes(),
    )
    .await
}

/// [`import_text`] of a file read a line at a time: memory stays bounded by
/// a batch of lines, however large the file (a server-memory file's
/// relations, names only, are kept until its entities are in). A line
/// that is not UTF-8 is an error of that line; a file in UTF-16 (what
/// Windows PowerShell 5.1 writes with `>`) is refused as a whole, saying
/// so; a read failure ends the import with an error.
pub async fn import_reader<R: tokio::io::AsyncBufRead + Unpin>(
    tools: ToolService,
    caller: Caller,
    source_path: String,
    format: ImportFormat,
    target: Option<ImportInto>,
    reader: R,
) -> Summary {
    let mut imp = Importer {
        tools,
        caller,
        source_path,
        source_tool: match format {
            ImportFormat::Zm => None,
            ImportFormat::ServerMemory => Some("mcp-server-memory"),
        },
        summary: Summary::default(),
    };
    let mut lines = Lines {
        reader,
        at: 0,
        buf: Vec::new(),
    };
    match format {
        ImportFormat::Zm => import_zm(&mut imp, &mut lines, target).await,
        ImportFormat::ServerMemory => {
            import_server_memory(&mut imp, &mut lines, target.unwrap_or(ImportInto::Personal))
                .await;
        }
    }
    imp.summary
}

/// An import file's lines, read one at a time.
struct Lines<R> {
    reader: R,
    /// The number of the last line read (1-based).
    at: usize,
    buf: Vec<u8>,
}

impl<R: tokio::io::AsyncBufRead + Unpin> Lines<R> {
    /// The next non-blank line and its number, as text; a line that is
    /// not UTF-8 is reported in `summary` and skipped. `None` at the end,
    /// or after a failure that ends the import (reported too).
    async fn next(&mut self, summary: &mut Summary) -> Option<(usize, String)> {
        loop {
            let too_long = match self.read_line().await {
                Ok(None) => return None,
                Ok(Some(too_long)) => too_long,
                Err(e) => {
                    // A line, if unread: "N of M lines" never has N > M.
                    summary.lines += 1;
                    summary.error(
                        self.at + 1,
                        format!("line {}: the file could not be read: {e}", self.at + 1),
                    );
                    return None;
                }
            };
            self.at += 1;
            if too_long {
                summary.lines += 1;
                summary.error(
                    self.at,
                    format!(
                        "line {}: longer than {} MiB, not read",
                        self.at,
                        MAX_LINE_BYTES >> 20
                    ),
                );
                continue;
            }
            let mut bytes = self.buf.as_slice();
            if self.at == 1 {
                if bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) {
                    summary.lines += 1;
                    summary.error(
                        self.at,
                        "the file is UTF-16 text (what Windows PowerShell 5.1 writes with `>`): save it as UTF-8 and import it again".to_string(),
                    );
                    return None;
                }
                // A byte-order mark (which many Windows editors write) is
                // not part of the first line.
                bytes = bytes.strip_prefix(&[0xEF, 0xBB, 0xBF]).unwrap_or(bytes);
            }
            let Ok(text) = std::str::from_utf8(bytes) else {
                summary.lines += 1;
                summary.error(self.at, format!("line {}: not UTF-8 text", self.at));
                continue;
            };
            let text = text.trim_end_matches('\n').trim_end_matches('\r');
            if text.trim().is_empty() {
                continue;
            }
            summary.lines += 1;
            return Some((self.at, text.to_string()));
        }
    }

    /// Read the next line into `buf`, at most [`MAX_LINE_BYTES`] of it (the
    /// rest of a longer one is read past, not kept). `None` at the end of
    /// the file; `Some(true)` for a line that was too long.
    async fn read_line(&mut self) -> std::io::Result<Option<bool>> {
        use tokio::io::AsyncBufReadExt;
        self.buf.clear();
        let mut too_long = false;
        let mut read_any = false;
        loop {
            let chunk = self.reader.fill_buf().await?;
            if chunk.is_empty() {
                return Ok(read_any.then_some(too_long));
            }
            read_any = true;
            let (part, done) = match chunk.iter().position(|b| *b == b'\n') {
                Some(i) => (&chunk[..=i], true),
                None => (chunk, false),
            };
            // The line's own bytes: its newline does not count.
            let content = part.len() - usize::from(done);
            if !too_long {
                if self.buf.len() + content > MAX_LINE_BYTES {
                    too_long = true;
                    self.buf.clear();
                } else {
                    self.buf.extend_from_slice(part);
                }
            }
            let used = part.len();
            self.reader.consume(used);
            if done {
                return Ok(Some(too_long));
            }
        }
    }
}

/// The longest line an import reads (a memory holds at most 65,536
/// characters; a server-memory entity may carry many observations).
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// What an import did.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    pub format: &'static str,
    /// Non-blank lines read.
    pub lines: usize,
    /// server-memory: entity lines.
    pub entities: usize,
    /// server-memory: relation lines.
    pub relations: usize,
    /// New memories stored.
    pub memories_imported: usize,
    /// Lines whose content was already stored as an identical live memory
    /// of the same kind in the target scope (recorded, not stored again),
    /// and zm lines whose exported memory is on this server, the
    /// importer's own and with the line's words (an export restored where
    /// it was taken: not stored a second time).
    pub memories_existing: usize,
    /// Lines imported by an earlier run (same source hash): skipped.
    pub memories_skipped: usize,
    /// zm: invalidated memories, which are not re-imported.
    pub invalidated_skipped: usize,
    /// zm: of those, the ones an earlier import had copied while they
    /// were live: the copy, unchanged since, is forgotten now.
    pub copies_retired: usize,
    /// server-memory: entity edges created.
    pub edges_created: usize,
    /// server-memory: entity edges that existed already.
    pub edges_existing: usize,
    /// Lines of which something could not be imported, each counted once
    /// (an entity line whose three observations were refused is one).
    pub lines_failed: usize,
    /// server-memory: memories imported but not attached to their entity
    /// for a reason of the moment (a database failure, concurrent writes,
    /// a rate limit). Each is an error too; the next run of the same
    /// import skips the memory and attaches it then.
    pub attachments_failed: usize,
    /// What could not be imported (the import exits 1), the first
    /// [`LISTED_ERRORS`] of them: one entry per failure, so a line may
    /// have several (one per refused observation).
    pub errors: Vec<String>,
    /// Errors beyond those listed in `errors`.
    #[serde(skip_serializing_if = "is_zero")]
    pub errors_unlisted: usize,
    /// Things that were imported incompletely (e.g. an entity that could
    /// not be anchored), the first [`LISTED_ERRORS`] of them.
    pub warnings: Vec<String>,
    /// Warnings beyond those listed in `warnings`.
    #[serde(skip_serializing_if = "is_zero")]
    pub warnings_unlisted: usize,
    /// The line of the last failure counted in `lines_failed` (0: none;
    /// lines count from 1). A line's failures are met one after another
    /// (its observations in turn; relations, read again after the
    /// entities, each once), so comparing with the last one counts each
    /// line once without keeping every failed line's number.
    #[serde(skip)]
    last_failed_line: usize,
}

/// How many errors (and warnings) a summary lists; the rest are counted.
/// A file of the wrong format fails on every line: its summary stays
/// small all the same.
pub const LISTED_ERRORS: usize = 1000;

/// The most characters one listed error or warning keeps: a line's names
/// (a relation's, a line type) are quoted, and a line may be megabytes,
/// so a thousand listed items stay a summary's size.
pub const LISTED_CHARS: usize = 600;

/// `what`, cut to [`LISTED_CHARS`] (marked with `…`).
fn listed(what: String) -> String {
    match what.char_indices().nth(LISTED_CHARS) {
        None => what,
        Some((at, _)) => format!("{}…", &what[..at]),
    }
}

/// A value of the file, quoted in an error when it is short and the
/// content guard finds nothing in it; otherwise only its length.
fn quoted(value: &str) -> String {
    if repeatable(value, 100) {
        format!("{value:?}")
    } else {
        format!(
            "(a value of {} characters, not repeated here)",
            value.chars().count()
        )
    }
}

/// May text read from the file be repeated in a summary: at most `max`
/// characters, and nothing the content guard finds in it?
fn repeatable(text: &str, max: usize) -> bool {
    text.chars().count() <= max && crate::guard::scan(text).is_none()
}

/// What the JSON reader found wrong with a line, without the line's words
/// where they could matter: serde quotes an offending value whole
/// (``invalid type: string "…"``), which may be the very secret a memory
/// would be refused for, or megabytes. Its message is kept when it is
/// short and the content guard finds nothing in it (``unknown variant
/// `factt`, expected one of …`` helps the person fixing the file);
/// otherwise only what kind of fault it is, and where.
fn json_fault(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let at = if e.column() > 0 {
        format!(" (line's column {})", e.column())
    } else {
        String::new()
    };
    match e.classify() {
        Category::Syntax | Category::Eof => format!("not valid JSON{at}"),
        Category::Io => "could not be read".to_string(),
        Category::Data => {
            let said = e.to_string();
            if repeatable(&said, 300) {
                said
            } else {
                format!("a field of the wrong type, or with a value not allowed{at}")
            }
        }
    }
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Summary {
    /// Something of line `line` that could not be imported.
    fn error(&mut self, line: usize, what: String) {
        if line != self.last_failed_line {
            self.last_failed_line = line;
            self.lines_failed += 1;
        }
        self.list_error(what);
    }

    /// A memory imported but not attached to its entity, which another
    /// run attaches: an error, but not of a line that was not imported.
    fn attachment_failed(&mut self, what: String) {
        self.attachments_failed += 1;
        self.list_error(what);
    }

    fn list_error(&mut self, what: String) {
        if self.errors.len() < LISTED_ERRORS {
            self.errors.push(listed(what));
        } else {
            self.errors_unlisted += 1;
        }
    }

    /// Something imported incompletely.
    fn warning(&mut self, what: String) {
        if self.warnings.len() < LISTED_ERRORS {
            self.warnings.push(listed(what));
        } else {
            self.warnings_unlisted += 1;
        }
    }

    /// What failed, listed or not: the lines of which something could
    /// not be imported, and the memories imported but not attached to
    /// their entity. Anything but 0 fails the import.
    pub fn failed(&self) -> usize {
        self.lines_failed + self.attachments_failed
    }

    /// What failed, as the import's last words (the CLI's last line, the
    /// dashboard's notice), or `None`: the lines of which something could
    /// not be imported, each counted once however many of its memories
    /// were refused, and apart from them the memories imported but not
    /// attached to their entity, which a new run attaches (it skips each
    /// such memory as imported and attaches it then).
    pub fn failure_text(&self) -> Option<String> {
        let s = self;
        let mut parts = Vec::new();
        if s.lines_failed > 0 {
            parts.push(format!(
                "{} of {} lines could not be imported; fix them and run the import again (what was imported is skipped)",
                s.lines_failed, s.lines
            ));
        }
        if s.attachments_failed > 0 {
            let (n, them) = match s.attachments_failed {
                1 => ("1 memory was".to_string(), "it"),
                n => (format!("{n} memories were"), "them"),
            };
            parts.push(format!(
                "{n} imported but could not be attached to {} entity (a database failure, concurrent writes or a rate limit); run the import again: it skips {them} as imported and attaches {them} then",
                if them == "it" { "its" } else { "their" }
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// The idempotency key of a server-memory line: the hash of its parts.
/// Parts without `|` are joined by it, as every earlier import keyed them
/// (a second run of an old file still finds them); when a part holds `|`
/// itself the join would be ambiguous (`A|x`,`y` and `A`,`x|y` read the
/// same), so those parts are hashed as a JSON array instead.
fn line_key(parts: &[&str]) -> String {
    if parts.iter().any(|p| p.contains('|')) {
        sha256_hex(&serde_json::to_string(parts).unwrap_or_default())
    } else {
        sha256_hex(&parts.join("|"))
    }
}

fn target_str(t: ImportTarget) -> &'static str {
    t.as_str()
}

/// Our entity type for a server-memory `entityType` (case-insensitive
/// exact match; anything else is a `concept`).
pub fn map_entity_type(raw: &str) -> EntityType {
    EntityType::parse(&raw.trim().to_lowercase()).unwrap_or(EntityType::Concept)
}

/// Our edge type for a server-memory `relationType`, and whether it is an
/// exact match (lowercased, spaces and `-` as `_`) rather than the
/// `relates_to` fallback.
pub fn map_edge_type(raw: &str) -> (EdgeType, bool) {
    let norm = raw.trim().to_lowercase().replace([' ', '-'], "_");
    match EdgeType::parse(&norm) {
        Some(t) => (t, true),
        None => (EdgeType::RelatesTo, false),
    }
}

/// The memory an observation becomes: the observation, led by the
/// entity's name unless it names the entity already, as a word of its own
/// ("Go" is not named by "Good at concurrency").
pub fn observation_content(name: &str, observation: &str) -> String {
    let obs = observation.trim();
    let key = crate::memories::match_key(name);
    if crate::memories::ScanText::new(obs).names(&key) {
        obs.to_string()
    } else {
        format!("{}: {obs}", name.trim())
    }
}

/// The memory an entity without observations becomes.
pub fn entity_content(name: &str, entity_type: &str) -> String {
    let t = entity_type.trim();
    let t = if t.is_empty() { "entity" } else { t };
    let article = if t.starts_with(['a', 'e', 'i', 'o', 'u', 'A', 'E', 'I', 'O', 'U']) {
        "an"
    } else {
        "a"
    };
    format!("{} is {article} {t}.", name.trim())
}

/// The memory a relation whose type is not ours becomes.
pub fn relation_content(from: &str, relation_type: &str, to: &str) -> String {
    let words = relation_type
        .replace(['_', '-'], " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    format!("{} {words} {}.", from.trim(), to.trim())
}

/// One entity line of a server-memory file.
#[derive(Debug, Deserialize)]
struct SmEntity {
    name: String,
    #[serde(rename = "entityType", default)]
    entity_type: String,
    #[serde(default)]
    observations: Vec<String>,
}

/// One relation line of a server-memory file.
#[derive(Debug, Deserialize)]
struct SmRelation {
    from: String,
    to: String,
    #[serde(rename = "relationType")]
    relation_type: String,
}

struct Importer {
    tools: ToolService,
    caller: Caller,
    source_path: String,
    source_tool: Option<&'static str>,
    summary: Summary,
}

impl Importer {
    /// Run one tool through the tool service (validation included): the
    /// same pipeline as MCP and REST, typed output back.
    async fn run<T: Handler>(&self, raw: &Value) -> Result<T::Output, ToolError> {
        self.tools
            .run::<T>(&self.caller, parse_input::<T::Input>(raw)?)
            .await
    }

    /// Forget the copy an earlier import made of `m` (an exported memory
    /// since retired), if it is still live and theirs as that import left
    /// it ([`Store::imported_copy`]): counted in `copies_retired`.
    async fn retire_copy(&mut self, line: usize, m: &Memory) {
        let hash = format!("{}:{}", m.id, sha256_hex(&m.content));
        let copy = match self
            .tools
            .store()
            .imported_copy(&self.caller.user_id, &hash)
            .await
        {
            Ok(Some(copy)) => copy,
            Ok(None) => return,
            Err(e) => {
                self.summary.error(
                    line,
                    format!("line {line}: memory {}: {}", m.id, describe(&e)),
                );
                return;
            }
        };
        let forget = json!({
            "memory_id": copy.as_str(),
            "reason": "retired where it was exported",
        });
        // A copy that cannot be forgotten now is left live, said as a
        // warning: nothing of this file failed to import.
        match self
            .run::<zm_contracts::catalogue::tool::Forget>(&forget)
            .await
        {
            Ok(_) => self.summary.copies_retired += 1,
            Err(e) => self.summary.warning(format!(
                "line {line}: memory {}: its copy {copy} from an earlier import was left live: {}",
                m.id,
                describe(&e)
            )),
        }
    }

    /// Import one memory; counts the outcome. Returns the memory id.
    async fn import(
        &mut self,
        content: &str,
        kind: MemoryKind,
        target: ImportTarget,
        source_hash: &str,
        extra: &[(&str, Value)],
    ) -> Result<Option<MemoryId>, ToolError> {
        let input = self.import_input(content, kind, target, source_hash, extra);
        let out: ImportMemoryOutput = self.run::<tool::ImportMemory>(&input).await?;
        self.count(&out);
        Ok(out.memory_id)
    }

    /// The `import_memory` input of one memory.
    fn import_input(
        &self,
        content: &str,
        kind: MemoryKind,
        target: ImportTarget,
        source_hash: &str,
        extra: &[(&str, Value)],
    ) -> Value {
        let mut input = json!({
            "content": content,
            "kind": kind.as_str(),
            "target": target_str(target),
            "source_path": self.source_path,
            "source_hash": source_hash,
        });
        if let Some(t) = self.source_tool {
            input["source_tool"] = json!(t);
        }
        for (k, v) in extra {
            input[*k] = v.clone();
        }
        input
    }

    /// Count one import's outcome.
    fn count(&mut self, out: &ImportMemoryOutput) {
        if out.skipped {
            self.summary.memories_skipped += 1;
        } else if out.deduplicated == Some(true) {
            self.summary.memories_existing += 1;
        } else {
            self.summary.memories_imported += 1;
        }
    }

    /// Import many memories in one transaction (each in its own savepoint:
    /// a refused one is reported with its line and label and the others
    /// land). `pending` (line, label, input) is emptied.
    async fn import_batch(&mut self, pending: &mut Vec<(usize, String, Value)>) {
        let mut labels = Vec::with_capacity(pending.len());
        let mut inputs = Vec::with_capacity(pending.len());
        for (line, label, raw) in pending.drain(..) {
            match parse_input(&raw) {
                Ok(input) => {
                    labels.push((line, label));
                    inputs.push(input);
                }
                Err(e) => self
                    .summary
                    .error(line, format!("{label}: {}", describe(&e))),
            }
        }
        if inputs.is_empty() {
            return;
        }
        match self
            .tools
            .run_batch::<tool::ImportMemory>(&self.caller, inputs)
            .await
        {
            Ok(results) => {
                for ((line, label), result) in labels.into_iter().zip(results) {
                    match result {
                        Ok(out) => self.count(&out),
                        Err(e) => self
                            .summary
                            .error(line, format!("{label}: {}", describe(&e))),
                    }
                }
            }
            Err(e) => {
                // The batch's transaction failed: none of it was written.
                for (line, label) in labels {
                    self.summary
                        .error(line, format!("{label}: {}", describe(&e)));
                }
            }
        }
    }

    /// Attach entities to an imported memory: `remember` the identical
    /// content in the same scope with `entities`, which deduplicates onto
    /// the memory and creates/attaches the (typed) entities. Done only while
    /// the memory is live, unchanged and still in that scope, so it can
    /// never create a second memory.
    async fn anchor(
        &mut self,
        id: &MemoryId,
        content: &str,
        target: ImportTarget,
        entities: &[(String, EntityType)],
    ) -> Result<(), ToolError> {
        let scope = match target {
            ImportTarget::Core => self.caller.core_scope(),
            _ => self.caller.personal_scope(),
        };
        let m = self.tools.store().get_memory(&self.caller, id).await?;
        if m.invalidated_at.is_some() || m.scope != scope || m.content != content.trim() {
            return Ok(());
        }
        let mentions: Vec<Value> = entities
            .iter()
            .map(|(name, t)| json!({"name": name, "type": t.as_str()}))
            .collect();
        let out: RememberOutput = self
            .run::<tool::Remember>(&json!({
                "content": content,
                "kind": "fact",
                "scope": target_str(target),
                "entities": mentions,
            }))
            .await?;
        if out.memory_id != *id {
            tracing::warn!(imported = %id, remembered = %out.memory_id, "anchoring landed on another memory");
        }
        Ok(())
    }

    async fn import_and_anchor(
        &mut self,
        line: usize,
        content: &str,
        target: ImportTarget,
        source_hash: &str,
        entities: &[(String, EntityType)],
    ) {
        match self
            .import(content, MemoryKind::Fact, target, source_hash, &[])
            .await
        {
            Ok(Some(id)) => {
                if let Err(e) = self.anchor(&id, content, target, entities).await {
                    let names: Vec<&str> = entities.iter().map(|(n, _)| n.as_str()).collect();
                    let what = format!(
                        "line {line}: imported, but could not attach it to {}: {}",
                        names.join(", "),
                        describe(&e)
                    );
                    // A failure a new run may not meet again is an error
                    // (the import exits 1), counted apart from the lines
                    // not imported: the line's memory is in, and the next
                    // run skips it and attaches it then. Any other is for
                    // good.
                    if worth_another_run(&e) {
                        self.summary.attachment_failed(what);
                    } else {
                        self.summary.warning(what);
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                // The line number, not the content: a refused content may
                // hold the very secret the guard refused (its refusal
                // carries the masked sample).
                self.summary
                    .error(line, format!("line {line}: {}", describe(&e)));
            }
        }
    }
}

/// Did this failure come from the moment rather than from the file (the
/// database failed, concurrent writes won, a limit of the moment), so that
/// running the same import again may succeed?
fn worth_another_run(e: &ToolError) -> bool {
    matches!(
        e.code,
        ErrorCode::Internal | ErrorCode::Conflict | ErrorCode::RateLimited
    )
}

/// Memories imported per transaction (one commit, one fsync).
const IMPORT_BATCH: usize = 500;

/// The text a batch holds before it is written, whatever its count: 500
/// lines of up to [`MAX_LINE_BYTES`] each would hold gigabytes. The
/// memories' content and verbatim bytes are counted (what a batch keeps of
/// a line); a batch of ordinary memories still ends at [`IMPORT_BATCH`].
const IMPORT_BATCH_BYTES: usize = 16 << 20;

/// Import our own JSONL export, in batches of [`IMPORT_BATCH`] memories or
/// [`IMPORT_BATCH_BYTES`] of text, whichever comes first.
async fn import_zm<R: tokio::io::AsyncBufRead + Unpin>(
    imp: &mut Importer,
    lines: &mut Lines<R>,
    target: Option<ImportInto>,
) {
    imp.summary.format = "zm";
    // (line, label, `import_memory` input, exported id); the content is
    // read back from the input, not kept twice.
    let mut pending: Vec<(usize, String, Value, String)> = Vec::with_capacity(IMPORT_BATCH);
    let mut pending_bytes = 0usize;
    let mut first = true;
    while let Some((line, raw)) = lines.next(&mut imp.summary).await {
        let is_first = std::mem::replace(&mut first, false);
        let m: Memory = match serde_json::from_str(&raw) {
            Ok(m) => m,
            Err(e) => {
                match server_memory_line(&raw) {
                    // A server-memory file imported without its `--format`:
                    // every line would fail alike (up to a thousand errors
                    // of a missing `id`), so the file is refused at its
                    // first line, saying which format it is.
                    Some(kind) if is_first => {
                        imp.summary.error(
                            line,
                            format!(
                                "line {line}: this file reads as a @modelcontextprotocol/server-memory file (a line of type {kind:?}), not a zero-memory export: import it as server-memory (`--format server-memory`); nothing was imported"
                            ),
                        );
                        return;
                    }
                    Some(kind) => imp.summary.error(
                        line,
                        format!(
                            "line {line}: not a memory of a zero-memory export: {} (it reads as a server-memory line of type {kind:?}, which `--format server-memory` imports)",
                            json_fault(&e)
                        ),
                    ),
                    None => imp.summary.error(
                        line,
                        format!(
                            "line {line}: not a memory of a zero-memory export: {}",
                            json_fault(&e)
                        ),
                    ),
                }
                continue;
            }
        };
        if m.invalidated_at.is_some() {
            imp.summary.invalidated_skipped += 1;
            // Retired where it was exported since an earlier import copied
            // it: that copy is forgotten too, or a later export would
            // leave it live beside its successor's copy. Exports appended
            // to one file hold the live line first: its copy, still in the
            // batch, is written before it is looked for, or the batch
            // would bring the retired memory back after this line.
            if pending.iter().any(|(_, _, _, id)| id == m.id.as_str()) {
                import_zm_batch(imp, &mut pending).await;
                pending_bytes = 0;
            }
            imp.retire_copy(line, &m).await;
            continue;
        }
        let to = match target {
            Some(ImportInto::Core) => ImportTarget::Core,
            Some(ImportInto::Personal) => ImportTarget::Personal,
            None if scope::is_core(&m.scope) => ImportTarget::Core,
            None => ImportTarget::Personal,
        };
        let label = format!("line {line}: memory {}", m.id);
        let verbatim = m
            .source
            .as_ref()
            .and_then(|s| s.get("verbatim"))
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty());
        // Text over the operator's limit is refused here, with the error
        // `import_memory` gives it, instead of being held in the batch to
        // be refused there. A blank content is left to the tool, which
        // names that first.
        let hash = format!("{}:{}", m.id, sha256_hex(&m.content));
        if !m.content.trim().is_empty()
            && let Err(e) = imp.tools.store().limits().check_text([
                ("content", Some(m.content.as_str())),
                ("verbatim", verbatim),
            ])
        {
            // Unless an earlier run imported it, when the limit was
            // higher: then it is skipped, as the tool would skip it.
            match imp
                .tools
                .store()
                .imported_before(&imp.caller.user_id, &hash)
                .await
            {
                Ok(true) => imp.summary.memories_skipped += 1,
                Ok(false) => imp
                    .summary
                    .error(line, format!("{label}: {}", describe(&e))),
                Err(e) => imp
                    .summary
                    .error(line, format!("{label}: {}", describe(&e))),
            }
            continue;
        }
        let mut extra: Vec<(&str, Value)> = Vec::new();
        if let Some(v) = verbatim {
            extra.push(("verbatim", json!(v)));
        }
        // The writing agent: an imported memory's is in its provenance
        // (`source_tool`), where an import of this export puts it too.
        let agent = m
            .agent_name
            .as_deref()
            .filter(|a| !a.trim().is_empty())
            .or_else(|| {
                m.source
                    .as_ref()
                    .and_then(|s| s.get("source_tool"))
                    .and_then(Value::as_str)
                    .filter(|a| !a.trim().is_empty())
            });
        if let Some(a) = agent {
            extra.push((
                "source_tool",
                json!(a.chars().take(200).collect::<String>()),
            ));
        }
        pending_bytes += m.content.len() + verbatim.map_or(0, str::len);
        let input = imp.import_input(&m.content, m.kind, to, &hash, &extra);
        pending.push((line, label, input, m.id.as_str().to_string()));
        if batch_is_full(pending.len(), pending_bytes) {
            import_zm_batch(imp, &mut pending).await;
            pending_bytes = 0;
        }
    }
    import_zm_batch(imp, &mut pending).await;
}

/// Is a batch of `len` lines holding `bytes` of text to be written now?
fn batch_is_full(len: usize, bytes: usize) -> bool {
    len >= IMPORT_BATCH || bytes >= IMPORT_BATCH_BYTES
}

/// The type of a line that reads as one of the server-memory format's (a
/// JSON object of `"type": "entity"` with a `name`, or of `"type":
/// "relation"` with `from` and `to`), if it is one.
fn server_memory_line(raw: &str) -> Option<&'static str> {
    let v: Value = serde_json::from_str(raw).ok()?;
    match v.get("type")?.as_str()? {
        "entity" if v.get("name").is_some() => Some("entity"),
        "relation" if v.get("from").is_some() && v.get("to").is_some() => Some("relation"),
        _ => None,
    }
}

/// One batch of zm lines: those whose exported memory is here already,
/// the importer's own and holding the line's words, are counted as
/// existing; the rest imported (a teammate's memory becomes the importer's
/// copy, an edited line a memory of its own).
async fn import_zm_batch(imp: &mut Importer, pending: &mut Vec<(usize, String, Value, String)>) {
    if pending.is_empty() {
        return;
    }
    let ids: Vec<&str> = pending.iter().map(|(_, _, _, id)| id.as_str()).collect();
    let here = match imp
        .tools
        .store()
        .own_memory_contents(&imp.caller, &ids)
        .await
    {
        Ok(here) => here,
        Err(e) => {
            for (line, label, _, _) in pending.drain(..) {
                imp.summary
                    .error(line, format!("{label}: {}", describe(&e)));
            }
            return;
        }
    };
    let mut batch: Vec<(usize, String, Value)> = Vec::with_capacity(pending.len());
    for (line, label, input, id) in pending.drain(..) {
        let content = input.get("content").and_then(Value::as_str);
        if here.get(&id).is_some_and(|c| Some(c.as_str()) == content) {
            imp.summary.memories_existing += 1;
        } else {
            batch.push((line, label, input));
        }
    }
    imp.import_batch(&mut batch).await;
}

/// One server-memory entity: a memory per observation (one naming the
/// entity when it has none), each anchored to the entity.
async fn import_entity(
    imp: &mut Importer,
    line: usize,
    e: &SmEntity,
    target: ImportTarget,
    types: &mut HashMap<String, EntityType>,
) {
    let name = e.name.trim();
    if name.is_empty() {
        imp.summary
            .error(line, format!("line {line}: the entity has no name"));
        return;
    }
    let etype = map_entity_type(&e.entity_type);
    types.entry(match_key(name)).or_insert(etype);
    let anchors = [(name.to_string(), etype)];
    let observations: Vec<&String> = e
        .observations
        .iter()
        .filter(|o| !o.trim().is_empty())
        .collect();
    if observations.is_empty() {
        let content = entity_content(name, &e.entity_type);
        let hash = line_key(&[&e.name, "entityType", &e.entity_type]);
        imp.import_and_anchor(line, &content, target, &hash, &anchors)
            .await;
        return;
    }
    for obs in observations {
        let content = observation_content(name, obs);
        let hash = line_key(&[&e.name, obs]);
        imp.import_and_anchor(line, &content, target, &hash, &anchors)
            .await;
    }
}

/// Import the JSONL file of `@modelcontextprotocol/server-memory`.
async fn import_server_memory<R: tokio::io::AsyncBufRead + Unpin>(
    imp: &mut Importer,
    lines: &mut Lines<R>,
    target: ImportInto,
) {
    imp.summary.format = "server-memory";
    let target = match target {
        ImportInto::Core => ImportTarget::Core,
        ImportInto::Personal => ImportTarget::Personal,
    };
    // Entity types by match key, for anchoring relation memories.
    let mut types: HashMap<String, EntityType> = HashMap::new();
    // Entities are imported as they are read; relations (names only) wait
    // until every entity is in, so that the typed entity exists before a
    // relation's `link` looks the name up.
    let mut relations: Vec<(usize, SmRelation)> = Vec::new();
    while let Some((line, raw)) = lines.next(&mut imp.summary).await {
        let v: Value = match serde_json::from_str(&raw) {
            Ok(v) => v,
            Err(e) => {
                imp.summary
                    .error(line, format!("line {line}: {}", json_fault(&e)));
                continue;
            }
        };
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "entity" => match serde_json::from_value::<SmEntity>(v) {
                Ok(e) => {
                    imp.summary.entities += 1;
                    import_entity(imp, line, &e, target, &mut types).await;
                }
                Err(e) => imp.summary.error(
                    line,
                    format!(
                        "line {line}: not a server-memory entity: {}",
                        json_fault(&e)
                    ),
                ),
            },
            "relation" => match serde_json::from_value::<SmRelation>(v) {
                Ok(r) => relations.push((line, r)),
                Err(e) => imp.summary.error(
                    line,
                    format!(
                        "line {line}: not a server-memory relation: {}",
                        json_fault(&e)
                    ),
                ),
            },
            other => imp.summary.error(
                line,
                format!(
                    "line {line}: unknown line type {} (expected \"entity\" or \"relation\")",
                    quoted(other)
                ),
            ),
        }
    }
    imp.summary.relations = relations.len();

    let nameable = |n: &str| crate::memories::nameable(&match_key(n));
    for (line, r) in &relations {
        // A name (or type) that looks like a secret: nothing of the line is
        // kept (a memory of it would hold the same secret), and it is
        // reported by its line number and the masked sample, never by the
        // names, whichever check would have met it first.
        if let Some(hit) = crate::guard::check_fields([
            ("from".to_string(), r.from.as_str()),
            ("to".to_string(), r.to.as_str()),
            ("relationType".to_string(), r.relation_type.as_str()),
        ]) {
            imp.summary.error(
                *line,
                format!(
                    "line {line}: relation not imported: {}",
                    describe(&crate::guard::rejection(&hit))
                ),
            );
            continue;
        }
        let (edge, exact) = map_edge_type(&r.relation_type);
        // What `link` refuses for good (an entity linked to itself, a name
        // without letters or digits, one too long or read as an id) makes
        // no edge; the relation is still kept, as a memory, and the import
        // goes on (a warning, not an error a second run would meet again).
        let unlinkable = if match_key(&r.from) == match_key(&r.to) {
            Some("an entity linked to itself".to_string())
        } else if !nameable(&r.from) || !nameable(&r.to) {
            Some("a name without letters or digits".to_string())
        } else if [&r.from, &r.to]
            .iter()
            .any(|n| zm_contracts::ids::parse_any_id(n.trim()).is_ok())
        {
            // `link` would read it as one of our ids: two would link two
            // memories (a teammate's, even) or fail as not found on every
            // run; one is refused as a mix. A server-memory name is no id.
            Some("a name read as an id".to_string())
        } else {
            let linked = imp
                .run::<tool::Link>(
                    &json!({"src": r.from.trim(), "dst": r.to.trim(), "type": edge.as_str()}),
                )
                .await;
            match linked {
                Ok(out) => {
                    if out.created {
                        imp.summary.edges_created += 1;
                    } else {
                        imp.summary.edges_existing += 1;
                    }
                    None
                }
                // Refused for what the names are: for good.
                Err(e) if e.code == ErrorCode::ValidationFailed => Some(describe(&e)),
                Err(e) => {
                    // Anything else (the moment, the quota, the account) is
                    // an error: the next run links it (and keeps its
                    // memory then).
                    imp.summary.error(
                        *line,
                        format!(
                            "line {line}: relation {:?} -[{}]-> {:?}: {}",
                            r.from,
                            r.relation_type,
                            r.to,
                            describe(&e)
                        ),
                    );
                    continue;
                }
            }
        };
        if let Some(why) = &unlinkable {
            imp.summary.warning(format!(
                "line {line}: relation {:?} -[{}]-> {:?}: no edge ({why}); kept as a memory",
                r.from, r.relation_type, r.to
            ));
        }
        if !exact || unlinkable.is_some() {
            let content = relation_content(&r.from, &r.relation_type, &r.to);
            let hash = line_key(&[&r.from, &r.relation_type, &r.to]);
            let type_of = |n: &str| {
                types
                    .get(&match_key(n))
                    .copied()
                    .unwrap_or(EntityType::Concept)
            };
            let mut anchors: Vec<(String, EntityType)> = Vec::new();
            for n in [&r.from, &r.to] {
                let n = n.trim().to_string();
                let an_id = zm_contracts::ids::parse_any_id(&n).is_ok();
                if nameable(&n)
                    && !an_id
                    && !anchors.iter().any(|(a, _)| match_key(a) == match_key(&n))
                {
                    let t = type_of(&n);
                    anchors.push((n, t));
                }
            }
            imp.import_and_anchor(*line, &content, target, &hash, &anchors)
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Import `text` as server-memory JSONL into `caller`'s personal scope.
    async fn server_memory(store: &crate::Store, caller: &Caller, text: &str) -> Summary {
        import_text(
            crate::ToolService::new(store.clone()),
            caller.clone(),
            "memory.jsonl".into(),
            ImportFormat::ServerMemory,
            Some(ImportInto::Personal),
            text,
        )
        .await
    }

    /// A file that cannot be read past its first line: the line it failed
    /// on counts among the lines, so the report never says more lines
    /// failed than were read.
    #[tokio::test]
    async fn a_read_failure_counts_its_line() {
        struct Failing(bool);
        impl tokio::io::AsyncRead for Failing {
            fn poll_read(
                mut self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                if self.0 {
                    return std::task::Poll::Ready(Err(std::io::Error::other("the disk is gone")));
                }
                self.0 = true;
                buf.put_slice(b"{\"type\":\"entity\",\"name\":\"Billing\",\"entityType\":\"project\",\"observations\":[\"invoices are kept seven years\"]}\n");
                std::task::Poll::Ready(Ok(()))
            }
        }
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "unreadable").await;
        let summary = import_reader(
            crate::ToolService::new(store.clone()),
            caller,
            "memory.jsonl".into(),
            ImportFormat::ServerMemory,
            Some(ImportInto::Personal),
            tokio::io::BufReader::new(Failing(false)),
        )
        .await;
        assert_eq!(
            (
                summary.lines,
                summary.lines_failed,
                summary.memories_imported
            ),
            (2, 1, 1),
            "{summary:?}"
        );
        assert!(
            summary.errors[0].contains("line 2: the file could not be read"),
            "{summary:?}"
        );
        assert_eq!(
            summary.failure_text().as_deref(),
            Some(
                "1 of 2 lines could not be imported; fix them and run the import again (what was imported is skipped)"
            )
        );
    }

    /// An observation imported but not attached to its entity because the
    /// database failed makes the import fail (exit 1), and the next run,
    /// which skips the memory, attaches it. (SQLite: a trigger refuses new
    /// entities for the first run.)
    #[tokio::test]
    async fn a_failed_attachment_fails_the_import_and_the_next_run_attaches_it() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "anchor").await;
        let text = r#"{"type":"entity","name":"Billing","entityType":"project","observations":["invoices are stored in Postgres"]}"#;
        let run = || server_memory(&store, &caller, text);
        sqlx::raw_sql(
            "CREATE TRIGGER refuse_entities BEFORE INSERT ON entities BEGIN SELECT RAISE(ABORT, 'entities refused'); END",
        )
        .execute(&store.pool)
        .await
        .expect("the trigger");
        let first = run().await;
        assert_eq!(first.memories_imported, 1, "{first:?}");
        assert_eq!(first.errors.len(), 1, "the attachment failed: {first:?}");
        // Counted apart: the line was imported, its memory is not attached.
        assert_eq!(
            (first.lines_failed, first.attachments_failed, first.failed()),
            (0, 1, 1),
            "{first:?}"
        );
        assert!(
            first.errors[0].contains("could not attach it to Billing"),
            "{first:?}"
        );
        let entities: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM entities")
            .fetch_one(&store.pool)
            .await
            .expect("count");
        assert_eq!(entities, 0);
        sqlx::raw_sql("DROP TRIGGER refuse_entities")
            .execute(&store.pool)
            .await
            .expect("drop the trigger");
        let second = run().await;
        assert!(
            second.errors.is_empty() && second.warnings.is_empty(),
            "{second:?}"
        );
        assert_eq!(second.memories_skipped, 1, "{second:?}");
        let attached: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM memory_entities me JOIN entities e ON e.id = me.entity_id WHERE e.name = 'Billing'",
        )
        .fetch_one(&store.pool)
        .await
        .expect("count");
        assert_eq!(attached, 1, "the next run attached it");
    }

    /// An entity line whose three observations the guard refuses is one
    /// line that could not be imported, with an error for each.
    #[tokio::test]
    async fn a_line_with_several_failures_counts_once() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "perline").await;
        let token = format!(
            "ghp_{}",
            "a1B2c3D4e5".repeat(4).get(..36).unwrap_or_default()
        );
        let text = [
            format!(
                r#"{{"type":"entity","name":"Deploy","entityType":"service","observations":["the token is {token}","the old token was {token}","CI reads {token}"]}}"#
            ),
            r#"{"type":"entity","name":"Billing","entityType":"project","observations":["invoices are kept seven years"]}"#.to_string(),
            "not json".to_string(),
        ]
        .join("\n");
        let summary = server_memory(&store, &caller, &text).await;
        assert_eq!(summary.errors.len(), 4, "{summary:?}");
        assert_eq!(
            (
                summary.lines,
                summary.lines_failed,
                summary.attachments_failed
            ),
            (3, 2, 0),
            "{summary:?}"
        );
        assert_eq!(summary.failed(), 2, "{summary:?}");
        assert_eq!(summary.memories_imported, 1, "{summary:?}");
    }

    /// A server-memory file imported as our export is refused at its first
    /// line, naming the format, instead of failing on every line; a
    /// server-memory line further down an export says what it is.
    #[tokio::test]
    async fn a_server_memory_file_read_as_an_export_names_its_format() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "wrongformat").await;
        let file = [
            r#"{"type":"entity","name":"Alice","entityType":"person","observations":["Prefers tea"]}"#,
            r#"{"type":"entity","name":"Bob","entityType":"person","observations":["Prefers coffee"]}"#,
            r#"{"type":"relation","from":"Alice","to":"Bob","relationType":"knows"}"#,
        ]
        .join("\n");
        let summary = zm_bytes(&store, &caller, file.as_bytes()).await;
        assert_eq!(summary.errors.len(), 1, "{summary:?}");
        assert!(
            summary.errors[0].starts_with("line 1: ")
                && summary.errors[0].contains("`--format server-memory`")
                && summary.errors[0].contains("nothing was imported"),
            "{summary:?}"
        );
        assert_eq!((summary.lines, summary.memories_imported), (1, 0));

        let memory = r#"{"id":"mem_0000000000000001.0000000001","content":"The first line imports.","kind":"fact","scope":"personal","visibility":"private","author_kind":"agent","agent_name":null,"source":null,"superseded_by":null,"invalidated_at":null,"created_at":"2026-01-01T00:00:00Z"}"#;
        let mixed = format!(
            "{memory}\n{}\n",
            r#"{"type":"relation","from":"Alice","to":"Bob","relationType":"knows"}"#
        );
        let summary = zm_bytes(&store, &caller, mixed.as_bytes()).await;
        assert_eq!(summary.memories_imported, 1, "{summary:?}");
        assert_eq!(summary.errors.len(), 1, "{summary:?}");
        assert!(
            summary.errors[0].starts_with("line 2: not a memory of a zero-memory export")
                && summary.errors[0].contains("`--format server-memory`"),
            "{summary:?}"
        );
    }

    /// An export's line over the operator's text limit is refused as it is
    /// read, with the error `import_memory` gives it; the rest imports.
    #[tokio::test]
    async fn text_over_the_limit_is_refused_as_the_tool_refuses_it() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let store = store.with_limits(crate::Limits {
            max_text_chars: 20,
            ..crate::Limits::default()
        });
        let caller = crate::testing::test_caller(&store, "limit").await;
        let line = |id: &str, content: &str| {
            format!(
                r#"{{"id":"{id}","content":"{content}","kind":"fact","scope":"personal","visibility":"private","author_kind":"agent","agent_name":null,"source":null,"superseded_by":null,"invalidated_at":null,"created_at":"2026-01-01T00:00:00Z"}}"#
            )
        };
        let file = format!(
            "{}\n{}\n",
            line(
                "mem_0000000000000001.0000000001",
                "This content is longer than twenty characters."
            ),
            line("mem_0000000000000002.0000000002", "Short enough.")
        );
        let summary = zm_bytes(&store, &caller, file.as_bytes()).await;
        assert_eq!(summary.errors.len(), 1, "{summary:?}");
        assert!(
            summary.errors[0].contains("content: must be at most 20 characters"),
            "{summary:?}"
        );
        assert_eq!(
            (summary.lines_failed, summary.memories_imported),
            (1, 1),
            "{summary:?}"
        );
        // What the tool itself answers for that content.
        let Err(tool) = crate::ToolService::new(store.clone())
            .call(
                &caller,
                zm_contracts::ToolName::parse("import_memory").unwrap(),
                &json!({
                    "content": "This content is longer than twenty characters.",
                    "kind": "fact",
                    "target": "personal",
                    "source_path": "export.jsonl",
                    "source_hash": "direct",
                }),
            )
            .await
        else {
            panic!("the tool took a content over the limit");
        };
        assert_eq!(
            summary.errors[0],
            format!(
                "line 1: memory mem_0000000000000001.0000000001: {}",
                describe(&tool)
            )
        );
    }

    /// A batch ends at its count or at its text, whichever comes first.
    #[test]
    fn a_batch_ends_at_its_count_or_its_size() {
        assert!(!batch_is_full(1, 0));
        assert!(batch_is_full(IMPORT_BATCH, 0));
        assert!(!batch_is_full(2, IMPORT_BATCH_BYTES - 1));
        assert!(batch_is_full(2, IMPORT_BATCH_BYTES));
        // Two lines of the longest kind make a batch.
        assert!(batch_is_full(2, 2 * (MAX_LINE_BYTES / 2 + 1)));
    }

    /// Lines whose parts hold `|` are told apart (joined, they would read
    /// the same), the keys of lines without it are those earlier imports
    /// used, and a byte-order mark before the first line is not part of it.
    #[tokio::test]
    async fn lines_that_join_alike_are_told_apart_and_a_bom_is_no_content() {
        assert_eq!(
            line_key(&["Bob", "likes tea"]),
            sha256_hex("Bob|likes tea"),
            "the key earlier imports gave this line"
        );
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "keys").await;
        let text = [
            "\u{feff}{\"type\":\"relation\",\"from\":\"Ann|x\",\"relationType\":\"y\",\"to\":\"Zed\"}",
            r#"{"type":"relation","from":"Ann","relationType":"x|y","to":"Zed"}"#,
            r#"{"type":"entity","name":"Bob","entityType":"person","observations":["entityType|person"]}"#,
            r#"{"type":"entity","name":"Bob","entityType":"person","observations":[]}"#,
        ]
        .join("\n");
        let run = || server_memory(&store, &caller, &text);
        let first = run().await;
        assert!(first.errors.is_empty(), "the BOM is not content: {first:?}");
        assert_eq!(first.memories_skipped, 0, "{first:?}");
        assert_eq!(
            first.memories_imported + first.memories_existing,
            4,
            "four lines, four memories: {first:?}"
        );
        let again = run().await;
        assert_eq!(again.memories_skipped, 4, "{again:?}");
    }

    /// A relation `link` refuses (an entity linked to itself by its match
    /// key, a name of punctuation only) makes no edge and no error: it is
    /// kept as a memory, with a warning, and the rest imports.
    #[tokio::test]
    async fn a_relation_link_refuses_is_kept_as_a_memory() {
        for (label, _dir, store) in crate::testing::stores().await {
            let caller = crate::testing::test_caller(&store, "rel").await;
            let text = [
                r#"{"type":"entity","name":"Node.js","entityType":"tool","observations":["runs the build"]}"#,
                r#"{"type":"relation","from":"Node JS","to":"node_js","relationType":"alias_of"}"#,
                r#"{"type":"relation","from":"!!!","to":"Web App","relationType":"relates_to"}"#,
                r#"{"type":"relation","from":"Web App","to":"Node.js","relationType":"depends_on"}"#,
                // Names `link` itself refuses: too long, and read as an id.
                &format!(
                    r#"{{"type":"relation","from":"{}","to":"Web App","relationType":"uses"}}"#,
                    "Very long name ".repeat(20)
                ),
                r#"{"type":"relation","from":"usr_0123456789abcdef.0123456789","to":"Web App","relationType":"uses"}"#,
            ]
            .join("\n");
            let summary = server_memory(&store, &caller, &text).await;
            assert!(summary.errors.is_empty(), "[{label}] {summary:?}");
            assert_eq!(
                summary.edges_created, 1,
                "[{label}] the good relation: {summary:?}"
            );
            assert_eq!(
                summary
                    .warnings
                    .iter()
                    .filter(|w| w.contains("no edge"))
                    .count(),
                4,
                "[{label}] {summary:?}"
            );
            // The observation and the four refused relations, as memories.
            assert_eq!(summary.memories_imported, 5, "[{label}] {summary:?}");
            // A second run meets no error either, and adds nothing.
            let again = server_memory(&store, &caller, &text).await;
            assert!(again.errors.is_empty(), "[{label}] {again:?}");
            assert_eq!(again.memories_imported, 0, "[{label}] {again:?}");
        }
    }

    /// A relation whose names read as our ids makes no edge (two would
    /// link two memories, one is a mix `link` refuses): it is kept as a
    /// memory with a warning, on every run alike, and no memory link is
    /// made between the caller's own memories it names.
    #[tokio::test]
    async fn a_relation_between_names_read_as_ids_is_kept_as_a_memory() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "idnames").await;
        let tools = crate::ToolService::new(store.clone());
        let mut ids = Vec::new();
        for content in [
            "The invoice job runs hourly.",
            "The invoice job emails finance.",
        ] {
            let out = tools
                .call(
                    &caller,
                    zm_contracts::ToolName::parse("remember").unwrap(),
                    &json!({"content": content, "kind": "fact", "scope": "personal"}),
                )
                .await
                .unwrap()
                .to_json();
            ids.push(out["memory_id"].as_str().unwrap().to_string());
        }
        let text = [
            json!({"type": "relation", "from": ids[0], "to": ids[1], "relationType": "works_at"}),
            json!({"type": "relation", "from": "mem_0123456789abcdef.0123456789", "to": "mem_0123456789abcdeg.0123456789", "relationType": "relates_to"}),
            json!({"type": "relation", "from": ids[0], "to": "Finance", "relationType": "relates_to"}),
        ]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>();
        for run in 0..2 {
            let summary = server_memory(&store, &caller, &text).await;
            assert!(summary.errors.is_empty(), "[run {run}] {summary:?}");
            assert_eq!(
                summary
                    .warnings
                    .iter()
                    .filter(|w| w.contains("read as an id"))
                    .count(),
                3,
                "[run {run}] {summary:?}"
            );
            assert_eq!(
                summary.memories_imported,
                if run == 0 { 3 } else { 0 },
                "[run {run}] {summary:?}"
            );
        }
        let links: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM memory_links")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(links, 0, "no memory linked by a relation");
    }

    /// Import raw bytes (which a `&str` cannot hold) as a zm export.
    async fn zm_bytes(store: &crate::Store, caller: &Caller, bytes: &[u8]) -> Summary {
        import_reader(
            crate::ToolService::new(store.clone()),
            caller.clone(),
            "export.jsonl".into(),
            ImportFormat::Zm,
            None,
            bytes,
        )
        .await
    }

    /// A line that is not UTF-8 is an error of that line, by its number,
    /// and the rest imports; a UTF-16 file is refused whole, saying so; a
    /// UTF-8 byte-order mark is not part of the first line.
    #[tokio::test]
    async fn a_line_that_is_not_utf8_fails_alone() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "bytes").await;
        let line = |id: &str, content: &str| {
            format!(
                r#"{{"id":"{id}","content":"{content}","kind":"fact","scope":"personal","visibility":"private","author_kind":"agent","agent_name":null,"source":null,"superseded_by":null,"invalidated_at":null,"created_at":"2026-01-01T00:00:00Z"}}"#
            )
        };
        let mut file = vec![0xEF, 0xBB, 0xBF];
        file.extend(line("mem_0000000000000001.0000000001", "The first line imports.").bytes());
        file.extend(b"\r\n{\"content\":\"caf\xE9\"}\n\n");
        file.extend(
            line(
                "mem_0000000000000002.0000000002",
                "The fourth line imports.",
            )
            .bytes(),
        );
        let summary = zm_bytes(&store, &caller, &file).await;
        assert_eq!(
            summary.errors,
            vec!["line 2: not UTF-8 text".to_string()],
            "{summary:?}"
        );
        assert_eq!(
            (summary.lines, summary.memories_imported),
            (3, 2),
            "{summary:?}"
        );

        let utf16: Vec<u8> = [0xFF, 0xFE]
            .into_iter()
            .chain("{}\n".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        let summary = zm_bytes(&store, &caller, &utf16).await;
        assert_eq!(summary.failed(), 1, "{summary:?}");
        assert!(summary.errors[0].contains("UTF-16"), "{summary:?}");
        assert_eq!(summary.memories_imported, 0);
    }

    /// A line longer than [`MAX_LINE_BYTES`] is read past, not kept: an
    /// error of that line, and the next line imports.
    #[tokio::test]
    async fn an_overlong_line_is_read_past() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "long").await;
        let mut file = vec![b'x'; MAX_LINE_BYTES + 10];
        file.extend(b"\n{\"type\":\"entity\",\"name\":\"Billing\",\"entityType\":\"project\",\"observations\":[\"invoices are kept seven years\"]}\n");
        let summary = import_reader(
            crate::ToolService::new(store.clone()),
            caller.clone(),
            "memory.jsonl".into(),
            ImportFormat::ServerMemory,
            None,
            file.as_slice(),
        )
        .await;
        assert_eq!(
            summary.errors,
            vec!["line 1: longer than 16 MiB, not read".to_string()],
            "{:?}",
            summary.errors
        );
        assert_eq!((summary.lines, summary.memories_imported), (2, 1));
    }

    /// A file of the wrong format fails on every line; the summary lists
    /// the first [`LISTED_ERRORS`] and counts the rest.
    #[tokio::test]
    async fn a_summary_lists_a_bounded_number_of_errors() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "many").await;
        let file = "not json\n".repeat(LISTED_ERRORS + 25);
        let summary = zm_bytes(&store, &caller, file.as_bytes()).await;
        assert_eq!(summary.errors.len(), LISTED_ERRORS);
        assert_eq!(summary.errors_unlisted, 25);
        assert_eq!(
            (summary.failed(), summary.lines),
            (LISTED_ERRORS + 25, LISTED_ERRORS + 25)
        );
    }

    /// A relation whose name looks like a secret is reported by its line
    /// and the guard's masked sample, never by the name itself (the
    /// summary is printed, to stdout with `--json`), and nothing of it is
    /// stored.
    #[tokio::test]
    async fn a_relation_naming_a_secret_is_reported_without_it() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "relsecret").await;
        let token = format!(
            "ghp_{}",
            "a1B2c3D4e5".repeat(4).get(..36).unwrap_or_default()
        );
        // Linked to CI, to itself, and to a name `link` refuses before its
        // own guard would run.
        let text = [
            format!(r#"{{"type":"relation","from":"{token}","to":"CI","relationType":"uses"}}"#),
            format!(
                r#"{{"type":"relation","from":"{token}","to":"{token}","relationType":"uses"}}"#
            ),
            format!(r#"{{"type":"relation","from":"{token}","to":"!!!","relationType":"uses"}}"#),
        ]
        .join("\n");
        let summary = server_memory(&store, &caller, &text).await;
        let printed = format!("{summary:?}");
        assert!(!printed.contains(&token), "{printed}");
        assert_eq!(summary.errors.len(), 3, "{printed}");
        assert!(
            summary.errors[0].starts_with("line 1: relation not imported"),
            "{printed}"
        );
        assert_eq!(
            (summary.memories_imported, summary.edges_created),
            (0, 0),
            "{printed}"
        );
    }

    /// Two exports appended into one file: a memory live in the first and
    /// retired in the second stays retired, though its live line's copy
    /// was still waiting in the batch when the retired line was read.
    #[tokio::test]
    async fn a_memory_retired_later_in_the_same_file_stays_retired() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "appended").await;
        let line = |invalidated: &str| {
            format!(
                r#"{{"id":"mem_0000000000000001.0000000001","content":"Staging deploys need a ticket.","kind":"fact","scope":"personal","visibility":"private","author_kind":"agent","agent_name":null,"source":null,"superseded_by":null,"invalidated_at":{invalidated},"created_at":"2026-01-01T00:00:00Z"}}"#
            )
        };
        let file = format!("{}\n{}\n", line("null"), line(r#""2026-02-01T00:00:00Z""#));
        let summary = zm_bytes(&store, &caller, file.as_bytes()).await;
        assert_eq!(
            (
                summary.memories_imported,
                summary.invalidated_skipped,
                summary.copies_retired,
                summary.failed()
            ),
            (1, 1, 1, 0),
            "{summary:?}"
        );
        let live: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM memories WHERE owner_id = ? AND invalidated_at IS NULL",
        )
        .bind(&caller.user_id)
        .fetch_one(&store.pool)
        .await
        .expect("count");
        assert_eq!(live, 0, "the retired memory came back");
    }

    /// A line the JSON reader refuses is reported without the value that
    /// failed it when that value could be a secret (serde quotes it whole)
    /// or is long; a short, harmless fault keeps serde's words, and any
    /// listed item is cut to [`LISTED_CHARS`].
    #[tokio::test]
    async fn a_malformed_line_is_reported_without_its_value() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "badvalue").await;
        let token = format!(
            "ghp_{}",
            "a1B2c3D4e5".repeat(4).get(..36).unwrap_or_default()
        );
        let long = "x".repeat(100_000);
        let text = [
            // Observations as a string, not a list: serde would quote it.
            format!(
                r#"{{"type":"entity","name":"Deploy","entityType":"service","observations":"the key is {token}"}}"#
            ),
            format!(r#"{{"type":"{long}"}}"#),
            r#"{"type":"entity","name":"Billing","entityType":"project","observations":7}"#
                .to_string(),
        ]
        .join("\n");
        let summary = server_memory(&store, &caller, &text).await;
        let printed = format!("{summary:?}");
        assert!(!printed.contains(&token), "{printed}");
        assert_eq!(summary.errors.len(), 3, "{printed}");
        assert!(
            summary.errors[0]
                .starts_with("line 1: not a server-memory entity: a field of the wrong type"),
            "{printed}"
        );
        assert_eq!(
            summary.errors[1],
            "line 2: unknown line type (a value of 100000 characters, not repeated here) (expected \"entity\" or \"relation\")"
        );
        // Whatever an item quotes, it is listed cut to LISTED_CHARS.
        let cut = listed("é".repeat(5 * LISTED_CHARS));
        assert!(
            cut.chars().count() == LISTED_CHARS + 1 && cut.ends_with('…'),
            "{}",
            cut.len()
        );
        assert_eq!(listed("short".to_string()), "short");
        assert!(
            summary.errors[2].contains("invalid type: integer `7`"),
            "{printed}"
        );

        let kind = format!(
            r#"{{"id":"mem_0000000000000001.0000000001","content":"A fact.","kind":"{long}","scope":"personal","visibility":"private","author_kind":"agent","agent_name":null,"source":null,"superseded_by":null,"invalidated_at":null,"created_at":"2026-01-01T00:00:00Z"}}"#
        );
        let summary = zm_bytes(&store, &caller, kind.as_bytes()).await;
        assert_eq!(summary.errors.len(), 1, "{summary:?}");
        assert!(
            summary.errors[0].starts_with(
                "line 1: not a memory of a zero-memory export: a field of the wrong type"
            ) && !summary.errors[0].contains("xxxxxxxxxx"),
            "{summary:?}"
        );
    }

    #[test]
    fn mappings() {
        assert_eq!(map_entity_type("Person"), EntityType::Person);
        assert_eq!(map_entity_type("organization"), EntityType::Concept);
        assert_eq!(map_edge_type("works on"), (EdgeType::WorksOn, true));
        assert_eq!(map_edge_type("Depends-On"), (EdgeType::DependsOn, true));
        assert_eq!(map_edge_type("works_at"), (EdgeType::RelatesTo, false));
        assert_eq!(map_edge_type("relates_to"), (EdgeType::RelatesTo, true));
        assert_eq!(
            observation_content("Alice", "likes tea"),
            "Alice: likes tea"
        );
        assert_eq!(
            observation_content("Alice", "alice likes tea"),
            "alice likes tea"
        );
        // Named only as a word of its own: inside another word is no name.
        for (name, obs, named) in [
            ("Go", "Good at concurrency", false),
            ("R", "Used for statistics", false),
            ("Go", "Uses Go for the CLI", true),
            ("Go", "go.mod pins 1.22", true),
            ("C++", "Wrote the engine in C++.", true),
            ("Node.js", "Node.jsx is another thing", false),
            ("Zoë", "Zoë's team owns billing", true),
            ("AI", "Maintains the airline fares", false),
        ] {
            let want = if named {
                obs.to_string()
            } else {
                format!("{name}: {obs}")
            };
            assert_eq!(observation_content(name, obs), want, "{name} in {obs:?}");
        }
        assert_eq!(
            entity_content("Acme", "organization"),
            "Acme is an organization."
        );
        assert_eq!(entity_content("Bob", "person"), "Bob is a person.");
        assert_eq!(
            relation_content("Alice", "works_at", "Acme"),
            "Alice works at Acme."
        );
    }
}
