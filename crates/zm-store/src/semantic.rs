//! Embeddings: what makes recall meet paraphrases (migration 0012).
//!
//! * **Writing.** `remember` never embeds. A background task (started by
//!   the server, see `zm-server`'s `embedder.rs`) calls
//!   [`Store::embed_pending`]: the live memories without a vector of the
//!   current model, newest first, a batch at a time (claimed, so that two
//!   instances never embed one memory), each batch's vectors written in
//!   one short transaction with the model's identity, the batch's claims
//!   released in it. A memory the model refuses gets a row without a
//!   vector, so it is not retried until the model changes.
//! * **Near-duplicates by meaning.** After each batch, the embedder files
//!   an `unjudged` conflict for every pair of live memories of one owner
//!   in one scope at cosine [`MEANING_DUPLICATE_FLOOR`] or more that has
//!   no conflict (of any status) and no link yet (when the model read
//!   either text only in part, their words must be alike too), for
//!   memories written in the last seven days and owners with fewer than
//!   100 pending conflicts ([`Store::file_meaning_duplicates`]). `remember` itself compares by
//!   words only: the new memory has no vector yet.
//! * **The index.** Every instance keeps the vectors of the current model
//!   in memory ([`VectorIndex`], int8: 384 bytes of codes per memory for
//!   the bundled model, about 580 with its sign bits, entry and id), for
//!   every memory with a vector, live or not (a restore needs no
//!   re-embedding), with each memory's owner, scope, sharing and liveness
//!   as of the last refresh. [`Store::refresh_vectors`] reads the rows
//!   written since (by any instance); [`Store::refresh_vector_meta`]
//!   re-reads the metadata (moves, shares, forgets) — the server does it
//!   every 30 s, and this instance's own changes (tools' writes, team
//!   operations) are seen at once.
//! * **Searching.** The index is a pre-filter only: it picks the nearest
//!   vectors among memories the caller could read as of the last refresh,
//!   and SQL then keeps those the caller reads **now** (the same
//!   visibility and read-set predicates as the full-text legs, see
//!   `search.rs`). A stale index can cost a dense hit, never leak one.
//!
//! Architecture invariant: a vector is compared only with vectors of the
//! same model identity, and only after the SQL visibility check.

use std::collections::{HashMap, HashSet};
#[cfg(test)]
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use zm_contracts::{MemoryId, MemoryKind, ToolError};
use zm_embed::{Encoder, Vector};

use crate::db::{Backend, DbResult, InstanceLock};
use crate::rows::{col, id_col};
use crate::scopes::ReadSet;
use crate::store::Store;

/// Characters of a memory given to the model (the bundled model reads
/// 128 tokens, about 500 characters; the rest would be cut anyway).
pub const EMBED_CHARS: usize = 2000;

/// Cosine at or above which two live memories of one owner in one scope
/// are filed as an `unjudged` conflict once both are embedded: near
/// duplicates by meaning, which word overlap (`similar_existing`, TF-IDF at
/// `remember`) misses when they are reworded. Chosen for the bundled model
/// on `bench/quality/duplicates-dev.jsonl` (see `docs/QUALITY.md`).
pub const MEANING_DUPLICATE_FLOOR: f32 = 0.88;

/// At most this many meaning near-duplicates are filed per embedded memory.
const MEANING_DUPLICATE_CAP: usize = 3;

/// How many of an embedded memory's nearest (at [`MEANING_DUPLICATE_FLOOR`]
/// or more) the sweep tries, nearest first, to file
/// [`MEANING_DUPLICATE_CAP`]: a pair already judged, linked or of the same
/// words is refused by SQL and takes no place.
const MEANING_DUPLICATE_SCAN: usize = 32;

/// How much of a text the bundled model surely reads, in characters of
/// English ([`read_whole`]): it reads 128 tokens, two of them special,
/// and WordPiece cuts English at about four characters a token, so 400
/// leaves room for numbers and rare words, which it cuts finer. (A model
/// from a directory may read more; it is then only checked more often.)
const MEANING_WHOLE_CHARS: usize = 400;

/// How much of each text the sweep compares by words when the model read
/// either only in part ([`words_alike_beyond_the_window`]): four times
/// what the model is given.
const MEANING_WORDS_CHARS: usize = 4 * EMBED_CHARS;

/// How alike by words (TF-IDF cosine) two texts close in meaning must be
/// when the model read either only in part: below `remember`'s own floor
/// for a near-duplicate ([`crate::similarity::SIMILAR_FLOOR`], 0.80),
/// whose pairs `remember` already reported, so that a long memory
/// restated in other words can still be paired. Not measured: the
/// near-duplicate data sets hold no pair this long.
const MEANING_WORDS_FLOOR: f64 = 0.5;

/// The sweep looks at memories written in the last seven days (store
/// clock): it flags what agents write now, not a backlog — re-embedding
/// under a new model files nothing for older memories (and a pair judged
/// once is never filed again). What an import brings is left out
/// whatever its age (an import's memories are written "now"): see
/// [`Store::file_meaning_duplicates`].
const MEANING_SWEEP_WINDOW_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// How long an idle embedder looks only at memories written since its
/// last whole pass found nothing (ms): a whole pass reads every memory.
const FULL_PASS_EVERY_MS: i64 = 10 * 60 * 1000;
/// How many rows behind the last one read a refresh re-reads on
/// PostgreSQL, where transactions may commit out of `vseq` order.
const PG_REREAD: i64 = 512;
/// How many memories behind its mark the embedder looks again for ones
/// still without a vector on PostgreSQL, where a memory may commit after
/// newer ones: wider than [`PG_REREAD`], since an import batch alone holds
/// 500 memories until it commits, and cheap (only memories without a
/// vector come back). One committed further behind waits for the next
/// whole pass ([`FULL_PASS_EVERY_MS`]).
const PG_PENDING_REREAD: i64 = 4096;
/// How long an embedder's claim on a batch lasts (ms): far longer than a
/// batch takes to embed (under a second with the bundled model, a few
/// with a large model from a directory), short enough that the memories
/// of an embedder that died are pending again soon.
const CLAIM_MS: i64 = 2 * 60 * 1000;

/// Up to this many vectors in the index, a nearest-neighbour search scans
/// them all exactly; beyond, it shortlists by sign bits first.
const EXACT_SCAN_MAX: usize = 20_000;

/// How many candidates per neighbour asked for the sign-bit pass keeps for
/// the exact int8 cosine.
const SHORTLIST_FACTOR: usize = 10;

/// What the index knows of one memory besides its id: 12 bytes, so the
/// scan's visibility pre-filter reads 1.2 MB at 100,000 vectors rather
/// than walking past every id (the scan's time did not move measurably:
/// its arithmetic dominates, see `docs/BENCHMARKS.md`).
#[derive(Debug, Clone, Copy)]
struct Entry {
    owner: u32,
    scope: u32,
    /// The memory's kind, interned like owners and scopes.
    kind: u32,
    shared: bool,
    live: bool,
}

/// Who asks the index: a user, and the scopes whose shared memories that
/// user reads now (their teams', and the projects shared with those
/// teams: [`Store::member_scopes`], read from the database for each
/// recall). A shared memory in any other scope is not a candidate: it must
/// not take one of the dense leg's places, nor be the nearest that the
/// others are measured against.
pub(crate) struct Reader<'a> {
    pub(crate) user: &'a str,
    pub(crate) member_scopes: &'a [String],
    /// The kinds a recall asks for (`None`: every kind): a memory of
    /// another kind takes none of the index's places either.
    pub(crate) kinds: Option<&'a [MemoryKind]>,
}

/// The in-memory vectors of one model.
#[derive(Debug, Default)]
pub(crate) struct VectorIndex {
    model: String,
    dims: usize,
    /// Entry `i`'s memory is `ids[i]`.
    ids: Vec<MemoryId>,
    entries: Vec<Entry>,
    /// Entry `i`'s int8 coordinates are `codes[i * dims..(i + 1) * dims]`
    /// and its scale `scales[i]`: one flat array, so a scan reads memory
    /// in order instead of chasing one allocation per vector.
    codes: Vec<i8>,
    scales: Vec<f32>,
    /// Entry `i`'s sign bits (see [`sign_bits`]), `dims / 64` words (rounded
    /// up) from `i × words`.
    signs: Vec<u64>,
    by_id: HashMap<MemoryId, usize>,
    /// Interned owners and scopes.
    names: HashMap<String, u32>,
    last_vseq: i64,
}

impl VectorIndex {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(i) = self.names.get(name) {
            return *i;
        }
        let i = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.names.insert(name.to_string(), i);
        i
    }

    /// Upsert every row holding a stored vector (`vec`) and the
    /// [`META_COLUMNS`]; a row whose bytes are not a vector of `dims` is
    /// skipped. A memory whose metadata this instance re-read after the
    /// rows were (`fresher`) keeps the metadata it has, and one not in
    /// the index yet is left out, its id in `skipped`, to be read again
    /// (its metadata read after that change): the rows' metadata would
    /// undo the change. Returns how many were upserted.
    fn upsert_rows(
        &mut self,
        rows: &[sqlx::any::AnyRow],
        dims: usize,
        fresher: impl Fn(&MemoryId) -> bool,
        skipped: &mut Vec<String>,
    ) -> Result<usize, ToolError> {
        let mut n = 0;
        for r in rows {
            let bytes: Option<Vec<u8>> = col(r, "vec")?;
            if let Some(vector) = bytes.and_then(|b| Vector::from_bytes(&b, dims)) {
                let meta = meta_of(r)?;
                if fresher(&meta.id) {
                    let Some(&i) = self.by_id.get(&meta.id) else {
                        skipped.push(meta.id.into_string());
                        continue;
                    };
                    if vector.dims() == self.dims {
                        self.set_vector(i, &vector);
                    }
                } else {
                    self.upsert(meta, &vector);
                }
                n += 1;
            }
        }
        Ok(n)
    }

    fn upsert(&mut self, meta: Meta, vector: &Vector) {
        if vector.dims() != self.dims {
            return;
        }
        let entry = Entry {
            owner: self.intern(&meta.owner),
            scope: self.intern(&meta.scope),
            kind: self.intern(&meta.kind),
            shared: meta.shared,
            live: meta.live,
        };
        match self.by_id.get(&meta.id) {
            Some(&i) => {
                self.entries[i] = entry;
                self.set_vector(i, vector);
            }
            None => {
                self.by_id.insert(meta.id.clone(), self.entries.len());
                self.ids.push(meta.id);
                self.entries.push(entry);
                self.codes.extend_from_slice(vector.values());
                self.scales.push(vector.scale());
                self.signs.extend(sign_bits(vector.values()));
            }
        }
    }

    /// Replace entry `i`'s vector (of this index's dims), its metadata
    /// as it is.
    fn set_vector(&mut self, i: usize, vector: &Vector) {
        self.codes[i * self.dims..(i + 1) * self.dims].copy_from_slice(vector.values());
        self.scales[i] = vector.scale();
        let bits = sign_bits(vector.values());
        let words = bits.len();
        self.signs[i * words..(i + 1) * words].copy_from_slice(&bits);
    }

    /// Entry `i`'s int8 coordinates.
    fn code(&self, i: usize) -> &[i8] {
        &self.codes[i * self.dims..(i + 1) * self.dims]
    }

    /// The cosine of entry `i`'s vector and the vector `(code, scale)` (of
    /// this index's dims).
    #[allow(clippy::cast_precision_loss)]
    #[inline(always)]
    fn cosine_with(&self, i: usize, code: &[i8], scale: f32) -> f32 {
        zm_embed::dot_i8(self.code(i), code) as f32 * self.scales[i] * scale
    }

    /// The cosine of entry `i`'s vector and `query`.
    #[inline(always)]
    fn cosine_at(&self, i: usize, query: &Vector) -> f32 {
        self.cosine_with(i, query.values(), query.scale())
    }

    /// Drop the entries at `gone` (ascending positions): each takes the
    /// last entry in its place, so the arrays stay dense. Returns how many.
    fn remove_at(&mut self, gone: &[usize]) -> usize {
        let dims = self.dims;
        let words = dims.div_ceil(64);
        for &i in gone.iter().rev() {
            let last = self.ids.len() - 1;
            self.by_id.remove(&self.ids[i]);
            if i != last {
                self.ids.swap(i, last);
                self.entries.swap(i, last);
                self.scales.swap(i, last);
                self.codes
                    .copy_within(last * dims..(last + 1) * dims, i * dims);
                self.signs
                    .copy_within(last * words..(last + 1) * words, i * words);
                self.by_id.insert(self.ids[i].clone(), i);
            }
            self.ids.pop();
            self.entries.pop();
            self.scales.pop();
            self.codes.truncate(last * dims);
            self.signs.truncate(last * words);
        }
        gone.len()
    }

    /// Does entry `i` already hold `meta`'s owner, scope, kind, sharing and
    /// liveness?
    fn meta_matches(&self, i: usize, meta: &Meta) -> bool {
        let e = &self.entries[i];
        let is = |name: &str, id: u32| self.names.get(name) == Some(&id);
        e.shared == meta.shared
            && e.live == meta.live
            && is(&meta.owner, e.owner)
            && is(&meta.scope, e.scope)
            && is(&meta.kind, e.kind)
    }

    fn set_meta(&mut self, meta: &Meta) {
        let Some(&i) = self.by_id.get(&meta.id) else {
            return;
        };
        let owner = self.intern(&meta.owner);
        let scope = self.intern(&meta.scope);
        let kind = self.intern(&meta.kind);
        let e = &mut self.entries[i];
        e.owner = owner;
        e.scope = scope;
        e.kind = kind;
        e.shared = meta.shared;
        e.live = meta.live;
    }

    /// The `limit` nearest live vectors among memories `user` may read in
    /// `set`, as of the last refresh; nearest first.
    ///
    /// Up to [`EXACT_SCAN_MAX`] vectors every candidate's int8 cosine is
    /// computed. Beyond, a first pass ranks the candidates by the Hamming
    /// distance of their sign bits to the query's (48 bytes a vector
    /// instead of 384), and only the [`SHORTLIST_FACTOR`] × `limit`
    /// closest by that measure get the exact int8 cosine: approximate,
    /// measured against the exact scan in `docs/BENCHMARKS.md`.
    fn nearest(
        &self,
        query: &Vector,
        reader: &Reader<'_>,
        set: &ReadSet,
        limit: usize,
    ) -> Vec<(MemoryId, f32)> {
        let shortlist = self.entries.len() > EXACT_SCAN_MAX;
        self.search(query, reader, set, limit, shortlist)
    }

    /// [`nearest`](Self::nearest), with the sign-bit shortlist or without.
    fn search(
        &self,
        query: &Vector,
        reader: &Reader<'_>,
        set: &ReadSet,
        limit: usize,
        approximate: bool,
    ) -> Vec<(MemoryId, f32)> {
        if self.entries.is_empty() || query.dims() != self.dims || limit == 0 {
            return Vec::new();
        }
        let me = self.names.get(reader.user).copied();
        // A scope the index has never seen holds no vector here.
        let members: HashSet<u32> = reader
            .member_scopes
            .iter()
            .filter_map(|p| self.names.get(p.as_str()).copied())
            .collect();
        let kinds: Option<Vec<u32>> = reader.kinds.map(|ks| {
            ks.iter()
                .filter_map(|k| self.names.get(k.as_str()).copied())
                .collect()
        });
        let scopes: Option<Vec<u32>> = match set {
            ReadSet::All => None,
            ReadSet::Scopes(s) => Some(
                s.iter()
                    .filter_map(|p| self.names.get(p).copied())
                    .collect(),
            ),
        };
        let readable = |e: &Entry| {
            e.live
                && (Some(e.owner) == me || (e.shared && members.contains(&e.scope)))
                && scopes.as_ref().is_none_or(|s| s.contains(&e.scope))
                && kinds.as_ref().is_none_or(|k| k.contains(&e.kind))
        };
        let mut best = TopK::new(limit);
        let shortlist = limit.saturating_mul(SHORTLIST_FACTOR);
        // The passes run in code compiled for the widest instruction set
        // this CPU has (AVX2 and POPCNT on most x86-64 since 2013; the
        // baseline where not), chosen at run time: the same arithmetic,
        // faster.
        let arch = pulp::Arch::new();
        if !approximate || shortlist >= self.entries.len() {
            arch.dispatch(CosinePass {
                index: self,
                query,
                keep: |i: usize| readable(&self.entries[i]),
                best: &mut best,
            });
        } else {
            let q = sign_bits(query.values());
            let mut distance = vec![u16::MAX; self.entries.len()];
            let mut histogram = vec![0usize; self.dims + 1];
            arch.dispatch(HammingPass {
                index: self,
                query: &q,
                readable: &readable,
                distance: &mut distance,
                histogram: &mut histogram,
            });
            // The smallest distance that keeps at least `shortlist`
            // candidates (all of them when fewer are readable).
            let mut kept = 0;
            let mut cut = self.dims;
            for (d, n) in histogram.iter().enumerate() {
                kept += n;
                if kept >= shortlist {
                    cut = d;
                    break;
                }
            }
            let cut = u16::try_from(cut).unwrap_or(u16::MAX - 1);
            arch.dispatch(CosinePass {
                index: self,
                query,
                keep: |i: usize| distance[i] <= cut,
                best: &mut best,
            });
        }
        best.into_sorted()
            .into_iter()
            .map(|(c, i)| (self.ids[i].clone(), c))
            .collect()
    }

    /// Live memories of the same owner in the same scope as memory `id`
    /// whose vectors are at least `floor` from its own, nearest first.
    fn near_duplicates(&self, id: &MemoryId, floor: f32, cap: usize) -> Vec<(MemoryId, f32)> {
        let Some(&i) = self.by_id.get(id) else {
            return Vec::new();
        };
        let me = &self.entries[i];
        if !me.live {
            return Vec::new();
        }
        let (code, scale) = (self.code(i), self.scales[i]);
        let mut found: Vec<(f32, usize)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(j, e)| *j != i && e.live && e.owner == me.owner && e.scope == me.scope)
            .filter_map(|(j, _)| {
                let c = self.cosine_with(j, code, scale);
                (c >= floor).then_some((c, j))
            })
            .collect();
        found.sort_by(|a, b| b.0.total_cmp(&a.0));
        found.truncate(cap);
        found
            .into_iter()
            .map(|(c, j)| (self.ids[j].clone(), c))
            .collect()
    }
}

/// A memory's metadata as the index keeps it.
#[derive(Debug, Clone)]
struct Meta {
    id: MemoryId,
    owner: String,
    scope: String,
    kind: String,
    shared: bool,
    live: bool,
}

/// What the index keeps of a memory, as columns of `memories m`: every
/// statement that feeds [`meta_of`] selects these.
const META_COLUMNS: &str = "m.id AS id, m.owner_id AS owner_id, m.scope AS scope, m.kind AS kind, \
     m.visibility AS visibility, m.invalidated_at AS invalidated_at";

fn meta_of(r: &sqlx::any::AnyRow) -> Result<Meta, ToolError> {
    let visibility: String = col(r, "visibility")?;
    let invalidated: Option<i64> = col(r, "invalidated_at")?;
    Ok(Meta {
        id: id_col(r, "id")?,
        owner: col(r, "owner_id")?,
        scope: col(r, "scope")?,
        kind: col(r, "kind")?,
        shared: visibility == "shared",
        live: invalidated.is_none(),
    })
}

/// Figures of the embedder, for `/metrics` and the logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SemanticStatus {
    /// The model's identity, once loaded.
    pub model: Option<String>,
    /// Vectors in this instance's index.
    pub indexed: usize,
    /// Memories embedded by this process, and the time spent on them.
    pub embedded: u64,
    /// Memories the model refused (kept without a vector).
    pub refused: u64,
    pub embed_micros: u64,
    /// Queries embedded by this process, and the time spent on them
    /// (refused ones included).
    pub queries: u64,
    pub query_micros: u64,
    /// Queries the model refused (an error, or no vector): those recalls
    /// ran on full text alone.
    pub queries_refused: u64,
    /// Near-duplicates by meaning filed as `unjudged` conflicts.
    pub duplicates: u64,
}

/// The metadata rows one refresh read, and where the index stood then.
struct MetaRows {
    model: String,
    dims: usize,
    /// Entries in the index before the rows were read.
    known: usize,
    /// [`Semantic::meta_epoch`] before the rows were read.
    epoch: u64,
    metas: Vec<Meta>,
}

/// Vectors one refresh read, and where the index stood then.
struct NewVectors {
    model: String,
    dims: usize,
    /// [`Semantic::meta_epoch`] before the rows were read.
    epoch: u64,
    /// The highest `vseq` read.
    after: i64,
    rows: Vec<sqlx::any::AnyRow>,
}

/// At most this many fresh vectors wait for their near-duplicate sweep.
const UNSWEPT_MAX: usize = 10_000;

/// A vector of another model written this recently, and since this
/// store was opened, replaced by this instance's, means another instance
/// embeds with that model now (a model change leaves vectors written
/// before the restart): said in the log, at most once in this long.
const RIVAL_MODEL_MS: i64 = 10 * 60 * 1000;

/// How many memories one statement of the near-duplicate sweep reads
/// about: with up to [`MEANING_DUPLICATE_SCAN`] neighbours each, its
/// lists stay far below both databases' bound values.
const SWEEP_CHUNK: usize = 64;

/// The embedding state every clone of a store shares.
#[derive(Default)]
pub(crate) struct Semantic {
    encoder: RwLock<Option<Arc<dyn Encoder>>>,
    index: RwLock<VectorIndex>,
    /// Where the current pass of [`Store::embed_pending`] is (the lowest
    /// `seq` it has looked at); 0: start again from the newest.
    cursor: AtomicU64,
    /// The newest `seq` the current pass knows of: memories written after
    /// it are embedded first, before the pass goes on down (0: none yet).
    top: AtomicU64,
    /// The newest `seq` when a whole pass last found nothing pending (0:
    /// not since the model was set): until [`FULL_PASS_EVERY_MS`] has
    /// passed, an idle embedder looks only above it.
    settled: AtomicU64,
    /// When `settled` was set (the store's clock, ms).
    settled_at: AtomicU64,
    /// SQLite's count of deleted memories when last read, plus one (0: not
    /// read yet): a change means `seq` values may be handed out again,
    /// below the marks above, so the next call starts a whole pass.
    deletions: AtomicU64,
    embedded: AtomicU64,
    refused: AtomicU64,
    embed_micros: AtomicU64,
    queries: AtomicU64,
    query_micros: AtomicU64,
    queries_refused: AtomicU64,
    /// `unjudged` conflicts filed by meaning.
    duplicates: AtomicU64,
    /// When (store clock, ms) this instance last warned that it replaced
    /// vectors another model had written within [`RIVAL_MODEL_MS`]: two
    /// instances on one database with different models re-embed each
    /// other's memories without end (0: never).
    rival_warned_at: AtomicU64,
    /// When (store clock, ms) the store was opened: a vector of another
    /// model written before it is this process's predecessor's (a model
    /// change), not a rival's.
    opened_at: i64,
    /// Bumped before this instance re-reads the metadata of what it
    /// changed itself (`reread_meta`), which notes each memory it re-read
    /// with that epoch in `meta_touched`: the periodic refresh, whose rows
    /// may have been read before that change, leaves those memories'
    /// metadata as the re-read set it (its next pass has rows read after
    /// it), and applies the rest.
    meta_epoch: AtomicU64,
    meta_touched: std::sync::Mutex<HashMap<MemoryId, u64>>,
    /// Fresh vectors whose near-duplicate sweep waits for the index to
    /// hold them (the refresh after their batch failed), or failed: swept
    /// with the next batch, or when the embedder is next idle
    /// ([`Store::sweep_by_meaning`]). Kept in memory only: a restart
    /// between a batch's commit and its sweep leaves those unswept (a pair
    /// the owner would have been asked to judge; nothing is lost).
    unswept: std::sync::Mutex<Vec<MemoryId>>,
    /// Hybrid fusion's constants: always
    /// [`Fusion::DEFAULT`](crate::search::Fusion::DEFAULT) but in the
    /// quality benchmark's sweep.
    fusion: RwLock<crate::search::Fusion>,
    /// Query vectors kept by text: only the quality benchmark's sweep
    /// keeps them, as it asks every query again under each constant.
    query_memo: RwLock<Option<HashMap<String, Vector>>>,
    /// How many queries are embedded at once.
    query_slots: QuerySlots,
    /// Tests: the next batch fails before it stores its vectors.
    #[cfg(test)]
    pub(crate) fail_next_store: AtomicBool,
    /// Tests: the next near-duplicate sweep by meaning fails.
    #[cfg(test)]
    pub(crate) fail_next_sweep: AtomicBool,
    /// Tests: run once by the next whole pass that found nothing, before
    /// it settles (a write landing between its lookups and its mark).
    #[cfg(test)]
    pub(crate) before_settle:
        std::sync::Mutex<Option<futures_util::future::BoxFuture<'static, ()>>>,
}

impl Semantic {
    /// The state of a store opened at `opened_at` (store clock, ms).
    pub(crate) fn opened_at(opened_at: i64) -> Semantic {
        Semantic {
            opened_at,
            ..Semantic::default()
        }
    }
}

/// One query embedding per core at a time: a burst of recalls waits its
/// turn rather than starting a forward pass (and its buffers) on a
/// blocking thread each, up to the runtime's 512, on a machine with two
/// cores.
struct QuerySlots(Arc<tokio::sync::Semaphore>);

impl Default for QuerySlots {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Self(Arc::new(tokio::sync::Semaphore::new(cores)))
    }
}

impl std::fmt::Debug for Semantic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semantic").finish_non_exhaustive()
    }
}

/// The int8 cosine of every entry `keep` admits, offered to `best`.
///
/// The passes are `pulp::WithSimd` values, not closures: pulp calls
/// `with_simd` inlined into a function compiled for the instruction set it
/// chose, and everything the loop calls is `#[inline(always)]`, so the
/// whole loop is compiled for that set (a closure's body stays a function
/// of its own, compiled for the baseline: measured, no gain).
struct CosinePass<'a, K> {
    index: &'a VectorIndex,
    query: &'a Vector,
    keep: K,
    best: &'a mut TopK,
}

impl<K: Fn(usize) -> bool> pulp::WithSimd for CosinePass<'_, K> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        for i in 0..self.index.entries.len() {
            if (self.keep)(i) {
                self.best.offer(self.index.cosine_at(i, self.query), i);
            }
        }
    }
}

/// The Hamming distance of every readable entry's sign bits to the
/// query's, and their histogram (see [`CosinePass`] for why a struct).
struct HammingPass<'a, R> {
    index: &'a VectorIndex,
    query: &'a [u64],
    readable: &'a R,
    distance: &'a mut [u16],
    histogram: &'a mut [usize],
}

impl<R: Fn(&Entry) -> bool> pulp::WithSimd for HammingPass<'_, R> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let words = self.query.len();
        for ((e, bits), d) in self
            .index
            .entries
            .iter()
            .zip(self.index.signs.chunks_exact(words))
            .zip(self.distance.iter_mut())
        {
            if (self.readable)(e) {
                *d = hamming(bits, self.query);
                self.histogram[usize::from(*d)] += 1;
            }
        }
    }
}

/// The `k` best `(cosine, entry)` offered so far.
struct TopK {
    k: usize,
    best: Vec<(f32, usize)>,
    floor: f32,
}

impl TopK {
    fn new(k: usize) -> TopK {
        TopK {
            k,
            best: Vec::with_capacity(k + 1),
            floor: f32::NEG_INFINITY,
        }
    }

    fn offer(&mut self, c: f32, i: usize) {
        if self.best.len() == self.k && c <= self.floor {
            return;
        }
        let at = self.best.partition_point(|(b, _)| *b >= c);
        self.best.insert(at, (c, i));
        if self.best.len() > self.k {
            self.best.pop();
        }
        if self.best.len() == self.k {
            self.floor = self.best[self.k - 1].0;
        }
    }

    /// Best first.
    fn into_sorted(self) -> Vec<(f32, usize)> {
        self.best
    }
}

/// One bit per coordinate, set when it is positive: 64 coordinates a word.
fn sign_bits(code: &[i8]) -> Vec<u64> {
    code.chunks(64)
        .map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .fold(0u64, |w, (j, v)| if *v > 0 { w | (1 << j) } else { w })
        })
        .collect()
}

/// How many of the bits differ (at most 64 × the words compared).
#[inline(always)]
fn hamming(a: &[u64], b: &[u64]) -> u16 {
    let d: u32 = a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum();
    u16::try_from(d).unwrap_or(u16::MAX - 1)
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Store {
    /// Use `encoder` for recall and the embedder from now on. A different
    /// model than before empties the index: its vectors are read again as
    /// they are written for the new model.
    pub fn set_encoder(&self, encoder: Arc<dyn Encoder>) {
        self.index_for(encoder.as_ref());
        self.publish_encoder(encoder);
    }

    /// Start using a model the way a server does: read the stored vectors
    /// of its identity into the index first, then let recall embed queries
    /// with it. Until then recall stays lexical, rather than fusing with a
    /// partial index (loaded oldest first). Answers how many vectors were
    /// read. A read that fails publishes nothing (recall stays lexical);
    /// the vectors read so far stay in the index, so the next call goes on
    /// from there.
    pub async fn load_encoder(&self, encoder: Arc<dyn Encoder>) -> Result<usize, ToolError> {
        self.index_for(encoder.as_ref());
        let read = self.refresh_vectors().await?;
        self.publish_encoder(encoder);
        Ok(read)
    }

    /// An empty index for the model's identity, unless it holds it already.
    fn index_for(&self, encoder: &dyn Encoder) {
        let mut index = write(&self.semantic.index);
        if index.model != encoder.model() {
            *index = VectorIndex {
                model: encoder.model().to_string(),
                dims: encoder.dims(),
                ..VectorIndex::default()
            };
        }
    }

    fn publish_encoder(&self, encoder: Arc<dyn Encoder>) {
        self.semantic.cursor.store(0, Ordering::Relaxed);
        self.semantic.top.store(0, Ordering::Relaxed);
        self.semantic.settled.store(0, Ordering::Relaxed);
        *write(&self.semantic.encoder) = Some(encoder);
    }

    /// The encoder, when one is set.
    pub(crate) fn encoder(&self) -> Option<Arc<dyn Encoder>> {
        read(&self.semantic.encoder).clone()
    }

    /// The embedder's figures.
    pub fn semantic_status(&self) -> SemanticStatus {
        let s = &self.semantic;
        SemanticStatus {
            model: self.encoder().map(|e| e.model().to_string()),
            indexed: read(&s.index).entries.len(),
            embedded: s.embedded.load(Ordering::Relaxed),
            refused: s.refused.load(Ordering::Relaxed),
            embed_micros: s.embed_micros.load(Ordering::Relaxed),
            queries: s.queries.load(Ordering::Relaxed),
            query_micros: s.query_micros.load(Ordering::Relaxed),
            queries_refused: s.queries_refused.load(Ordering::Relaxed),
            duplicates: s.duplicates.load(Ordering::Relaxed),
        }
    }

    /// The embedder's figures in the Prometheus text format (nothing in
    /// lexical mode or before the model is loaded).
    pub async fn semantic_metrics(&self) -> String {
        let st = self.semantic_status();
        let Some(model) = &st.model else {
            return String::new();
        };
        let queue = match self.embedding_queue().await {
            Ok(n) => n.to_string(),
            Err(_) => "NaN".into(),
        };
        #[allow(clippy::cast_precision_loss)]
        let secs = |us: u64| us as f64 / 1e6;
        let model = model.replace(['\\', '"', '\n'], "_");
        format!(
            "# HELP zm_embedding_model The embedding model in use (hybrid recall).\n# TYPE zm_embedding_model gauge\nzm_embedding_model{{model=\"{model}\"}} 1\n\
             # HELP zm_embedding_queue Live memories not embedded yet (recall finds them by full text only).\n# TYPE zm_embedding_queue gauge\nzm_embedding_queue {queue}\n\
             # HELP zm_embedding_indexed Vectors in this instance's index.\n# TYPE zm_embedding_indexed gauge\nzm_embedding_indexed {}\n\
             # HELP zm_embedded_total Memories embedded by this process.\n# TYPE zm_embedded_total counter\nzm_embedded_total {}\n\
             # HELP zm_embedding_refused_total Memories the model refused to embed, kept without a vector (recall finds them by full text only; `zero-memory reindex --all` tries them again).\n# TYPE zm_embedding_refused_total counter\nzm_embedding_refused_total {}\n\
             # HELP zm_embedding_seconds_total Time spent embedding memories.\n# TYPE zm_embedding_seconds_total counter\nzm_embedding_seconds_total {:.3}\n\
             # HELP zm_query_embeddings_total Queries given to the model by this process (refused ones included).\n# TYPE zm_query_embeddings_total counter\nzm_query_embeddings_total {}\n\
             # HELP zm_query_embedding_seconds_total Time spent embedding queries.\n# TYPE zm_query_embedding_seconds_total counter\nzm_query_embedding_seconds_total {:.3}\n\
             # HELP zm_query_embeddings_refused_total Queries the model refused (an error, or no vector): those recalls ran on full text alone.\n# TYPE zm_query_embeddings_refused_total counter\nzm_query_embeddings_refused_total {}\n\
             # HELP zm_meaning_duplicates_total Near-duplicates by meaning filed as unjudged conflicts by this process.\n# TYPE zm_meaning_duplicates_total counter\nzm_meaning_duplicates_total {}\n",
            st.indexed,
            st.embedded,
            st.refused,
            secs(st.embed_micros),
            st.queries,
            secs(st.query_micros),
            st.queries_refused,
            st.duplicates,
        )
    }

    /// Live memories without a vector of the current model (0 without a
    /// model).
    pub async fn embedding_queue(&self) -> Result<i64, ToolError> {
        let Some(enc) = self.encoder() else {
            return Ok(0);
        };
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM memories m WHERE m.invalidated_at IS NULL AND NOT EXISTS \
             (SELECT 1 FROM memory_vectors v WHERE v.memory_id = m.id AND v.model = $1)",
        )
        .bind(enc.model())
        .fetch_one(&self.pool)
        .await
        .db("embedding queue")
    }

    /// When no live memory has a vector of `model` but some have one of
    /// another: the model most of them are of, and how many. `reindex` run
    /// from a shell without the server's model setting would replace them
    /// all. `None` on a fresh database, once any memory has a vector of
    /// `model` (a switch the server or an earlier run began), and for the
    /// rows retired memories keep of an earlier model.
    pub async fn vectors_of_another_model(
        &self,
        model: &str,
    ) -> Result<Option<(String, i64)>, ToolError> {
        let row: Option<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT v.model, COUNT(*) AS n FROM memory_vectors v JOIN memories m ON m.id = v.memory_id \
             WHERE m.invalidated_at IS NULL AND v.model <> $1 \
             AND NOT EXISTS (SELECT 1 FROM memory_vectors w JOIN memories k ON k.id = w.memory_id \
                 WHERE w.model = $1 AND k.invalidated_at IS NULL) \
             GROUP BY v.model ORDER BY n DESC, {} LIMIT 1",
            self.backend.bytewise("v.model")
        )))
        .bind(model)
        .fetch_optional(&self.pool)
        .await
        .db("vectors of another model")?;
        Ok(row)
    }

    /// Live memories the current model refused, by any embedder at any
    /// time: stored with a row of the model and no vector, found by full
    /// text only (0 without a model).
    pub async fn refused_memories(&self) -> Result<i64, ToolError> {
        let Some(enc) = self.encoder() else {
            return Ok(0);
        };
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM memories m JOIN memory_vectors v ON v.memory_id = m.id \
             WHERE m.invalidated_at IS NULL AND v.model = $1 AND v.vec IS NULL",
        )
        .bind(enc.model())
        .fetch_one(&self.pool)
        .await
        .db("refused memories")
    }

    /// Embed up to `max` live memories that have no vector of the current
    /// model, newest first, and write their vectors. Returns how many were
    /// written; 0 when none is pending (or no model is set).
    pub async fn embed_pending(&self, max: usize) -> Result<usize, ToolError> {
        let Some(enc) = self.encoder() else {
            return Ok(0);
        };
        let model = enc.model().to_string();
        let limit = i64::try_from(max.max(1)).unwrap_or(64);
        let now = self.now();
        // Pending memories with `seq` above or below a bound, newest first,
        // but for those another embedder is embedding now.
        let pending = |bound: Option<(&str, i64)>| {
            let mut sql = crate::sql::Sql::new(&format!(
                "SELECT m.seq AS seq, m.id AS id, substr(m.content, 1, {EMBED_CHARS}) AS content FROM memories m WHERE"
            ));
            sql.push("  m.invalidated_at IS NULL AND NOT EXISTS (SELECT 1 FROM memory_vectors v WHERE v.memory_id = m.id AND v.model = ")
                .bind_str(model.clone())
                .push(") AND NOT EXISTS (SELECT 1 FROM embedding_claims c WHERE c.memory_id = m.id AND c.model = ")
                .bind_str(model.clone())
                .push(" AND c.until_at > ")
                .bind_i64(now)
                .push(")");
            if let Some((op, seq)) = bound {
                sql.push(&format!(" AND m.seq {op} ")).bind_i64(seq);
            }
            sql.push(" ORDER BY m.seq DESC LIMIT ").bind_i64(limit);
            sql
        };
        let s = &self.semantic;
        if self.backend == Backend::Sqlite {
            self.restart_after_deletions().await?;
        }
        let as_i64 = |a: &AtomicU64| i64::try_from(a.load(Ordering::Relaxed)).unwrap_or(0);
        // The pending memories written after `mark` (newest first), and
        // `mark` moved up to the newest once all of them are taken.
        // PostgreSQL hands out `seq` at insert, not at commit: a memory
        // committed after a newer one moved `mark` past it sits just below
        // `mark`, so the last PG_PENDING_REREAD are looked at again (the
        // embedded ones are left out by the query).
        //
        // The mark moves only once the batch is claimed (below), and not
        // past a memory another embedder holds: were its claim to lapse
        // unwritten (that embedder killed), the memory would sit below the
        // mark until the next whole pass, ten minutes, not the claim's two.
        let written_since =
            async |mark: &AtomicU64| -> Result<(Vec<sqlx::any::AnyRow>, Option<i64>), ToolError> {
                let at = as_i64(mark);
                let since = match self.backend {
                    Backend::Sqlite => at,
                    Backend::Postgres => (at - PG_PENDING_REREAD).max(0),
                };
                let rows = pending(Some((">", since)))
                    .query()
                    .fetch_all(&self.pool)
                    .await
                    .db("new pending embeddings")?;
                let mut up_to = None;
                if let Some(newest) = rows.first()
                    && i64::try_from(rows.len()).unwrap_or(i64::MAX) < limit
                {
                    let seq: i64 = col(newest, "seq")?;
                    let held: Option<i64> = sqlx::query_scalar(
                    "SELECT MIN(m.seq) FROM embedding_claims c JOIN memories m ON m.id = c.memory_id \
                     WHERE c.model = $1 AND c.until_at > $2 AND m.seq > $3 AND m.invalidated_at IS NULL",
                )
                .bind(&model)
                .bind(now)
                .bind(since)
                .fetch_one(&self.pool)
                .await
                .db("held embeddings")?;
                    up_to = Some(held.map_or(seq, |h| seq.min(h - 1)));
                }
                Ok((rows, up_to))
            };
        let mut rows = Vec::new();
        // Where a whole pass stood: a batch of it that fails puts it back.
        let cursor_before = s.cursor.load(Ordering::Relaxed);
        // The mark to move once the batch is claimed, and how far.
        let mut move_mark: Option<(&AtomicU64, i64)> = None;
        // Memories written since the pass began come first: a long pass (a
        // model change, a large import) does not leave them lexical-only
        // until it ends.
        if as_i64(&s.top) > 0 && as_i64(&s.cursor) > 0 {
            let (found, up_to) = written_since(&s.top).await?;
            rows = found;
            move_mark = up_to.map(|u| (&s.top, u));
        }
        // Settled (a whole pass found nothing pending, not long ago): only
        // what was written since is looked at, not every memory again each
        // idle second. A memory no pass can see coming (restored without
        // a vector) waits for the next whole pass. (No pass settles while
        // other embedders hold claims, below: what they hold then is
        // older than the mark only if it was restored.)
        let fresh = self.now() - as_i64(&s.settled_at) < FULL_PASS_EVERY_MS;
        if rows.is_empty() && as_i64(&s.cursor) == 0 && as_i64(&s.settled) > 0 && fresh {
            let (found, up_to) = written_since(&s.settled).await?;
            rows = found;
            move_mark = up_to.map(|u| (&s.settled, u));
            if rows.is_empty() {
                return Ok(0);
            }
        }
        // One pass walks down from the newest memory; when it reaches the
        // oldest, the next call starts again from the top.
        if rows.is_empty() {
            for _ in 0..2 {
                let below = as_i64(&s.cursor);
                // A whole pass settles at the newest memory it could have
                // seen: read before it looks. Read after, it could name a
                // memory committed meanwhile (a `remember` the lookups
                // below waited on), which the mark would then hide until
                // the next whole pass.
                let newest_before: Option<i64> = if below == 0 {
                    sqlx::query_scalar("SELECT MAX(seq) FROM memories")
                        .fetch_one(&self.pool)
                        .await
                        .db("newest memory")?
                } else {
                    None
                };
                rows = pending((below > 0).then_some(("<", below)))
                    .query()
                    .fetch_all(&self.pool)
                    .await
                    .db("pending embeddings")?;
                if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
                    if below == 0 {
                        let seq: i64 = col(first, "seq")?;
                        s.top
                            .store(u64::try_from(seq).unwrap_or(0), Ordering::Relaxed);
                    }
                    let seq: i64 = col(last, "seq")?;
                    s.cursor
                        .store(u64::try_from(seq).unwrap_or(0), Ordering::Relaxed);
                    break;
                }
                if below == 0 {
                    // A whole pass found nothing: settled at the newest.
                    // Claims of embedders that died before they wrote
                    // lapsed; those of memories forgotten meanwhile would
                    // stay: drop what lapsed, of this model only (an
                    // embedder of another model never drops what another
                    // is embedding). Lapsed by this instance's clock: one
                    // running more than CLAIM_MS ahead of another's drops
                    // (and takes) that one's live claims, and the batch is
                    // embedded twice (docs/POSTGRESQL.md asks for clocks
                    // in step).
                    sqlx::query("DELETE FROM embedding_claims WHERE model = $1 AND until_at <= $2")
                        .bind(&model)
                        .bind(now)
                        .execute(&self.pool)
                        .await
                        .db("drop lapsed embedding claims")?;
                    // What other embedders hold now is not settled: their
                    // batches may fail, or their claims lapse. Whole
                    // passes go on while any is held.
                    if self.claims_held(&model).await? > 0 {
                        return Ok(0);
                    }
                    #[cfg(test)]
                    {
                        let hook = self.semantic.before_settle.lock().expect("hook").take();
                        if let Some(hook) = hook {
                            hook.await;
                        }
                    }
                    // Nothing written yet: no mark to settle at. (A mark of
                    // 1 hid the first memory, `seq` 1 on SQLite, from every
                    // call until the next whole pass, ten minutes on.)
                    let Some(newest) = newest_before
                        .and_then(|n| u64::try_from(n).ok())
                        .filter(|n| *n > 0)
                    else {
                        return Ok(0);
                    };
                    s.settled_at
                        .store(u64::try_from(self.now()).unwrap_or(0), Ordering::Relaxed);
                    s.settled.store(newest, Ordering::Relaxed);
                    return Ok(0);
                }
                s.cursor.store(0, Ordering::Relaxed);
            }
        }
        let mut batch: Vec<(String, String)> = Vec::with_capacity(rows.len());
        for r in &rows {
            batch.push((col(r, "id")?, col(r, "content")?));
        }
        // Another instance may have read the same memories since: embed
        // only those this one claims.
        // A claim is this embedder's while it holds this `until_at`: one
        // that lapsed and was taken over holds another's.
        let until = now.saturating_add(CLAIM_MS);
        let claimed = match self.claim_for_embedding(&model, &batch, now, until).await {
            Ok(claimed) => claimed,
            Err(e) => {
                // Nothing claimed: the pass goes back to before the batch,
                // as after a failed store, and reads it again next call.
                s.cursor.store(cursor_before, Ordering::Relaxed);
                return Err(e);
            }
        };
        if let Some((mark, up_to)) = move_mark {
            // Not past one another embedder claimed since it was read.
            let mut up_to = up_to;
            for r in &rows {
                let id: String = col(r, "id")?;
                if !claimed.contains(&id) {
                    up_to = up_to.min(col::<i64>(r, "seq")? - 1);
                }
            }
            move_mark = Some((mark, up_to));
        }
        // The mark moves past this batch once its vectors are stored: a
        // batch that fails leaves it, and its memories are looked at
        // again (not only at the next whole pass, ten minutes on).
        let move_mark = move || {
            if let Some((mark, up_to)) = move_mark {
                mark.fetch_max(u64::try_from(up_to).unwrap_or(0), Ordering::Relaxed);
            }
        };
        batch.retain(|(id, _)| claimed.contains(id));
        if batch.is_empty() {
            move_mark();
            return Ok(0);
        }
        let stored = self.store_embeddings(&enc, &model, &batch, until).await;
        if stored.is_err() {
            // A whole pass goes back to where it stood before the batch.
            s.cursor.store(cursor_before, Ordering::Relaxed);
            // Its claims go with it, so that the next call (or another
            // instance) takes these memories at once, not after the claim
            // lapses. Best effort: a claim left lapses all the same.
            let released = async {
                let mut conn = self.pool.acquire().await?;
                release_claims(&mut conn, &model, &batch, until).await
            };
            if let Err(e) = released.await {
                tracing::warn!(target: "zm_store", error = %e, "could not release the claims of a failed embedding batch");
            }
        }
        let fresh = stored?;
        move_mark();
        s.embedded
            .fetch_add(u64::try_from(fresh.len()).unwrap_or(0), Ordering::Relaxed);
        // The vectors are stored: what follows must not fail the batch (it
        // would not come back, no longer pending). The index loads them
        // at its next refresh at the latest.
        self.sweep_by_meaning(fresh).await;
        Ok(batch.len())
    }

    /// Sweep the memories embedded but not yet swept for near-duplicates
    /// by meaning: those of a batch that failed to sweep (kept in memory,
    /// at most [`UNSWEPT_MAX`]), with `fresh`. The embedder calls it with
    /// nothing fresh when it is idle, so a sweep that failed is tried
    /// again without waiting for the next memory to embed.
    pub async fn sweep_by_meaning(&self, mut fresh: Vec<MemoryId>) {
        let s = &self.semantic;
        // The sweep compares through the index: it waits until the index
        // holds the fresh vectors (a sweep without them would find nothing,
        // and never come back to them).
        let mut unswept = std::mem::take(
            &mut *s
                .unswept
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        unswept.append(&mut fresh);
        if unswept.is_empty() {
            return;
        }
        let wait = |mut unswept: Vec<MemoryId>| {
            let mut waiting = s
                .unswept
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            waiting.append(&mut unswept);
            // Bounded: past it, the oldest go unswept (a conflict the
            // owner would have been asked to judge, nothing lost).
            let over = waiting.len().saturating_sub(UNSWEPT_MAX);
            waiting.drain(..over);
        };
        if let Err(e) = self.refresh_vectors().await {
            tracing::warn!(target: "zm_store", error = %e.message, "could not load fresh vectors into the index");
            wait(unswept);
            return;
        }
        if let Err(e) = self.file_meaning_duplicates(&unswept).await {
            // Swept with the next batch, or when the embedder is next
            // idle: these have vectors now, no pass would come back to
            // them.
            tracing::warn!(target: "zm_store", error = %e.message, "the near-duplicate sweep by meaning failed for a batch");
            wait(unswept);
        }
    }

    /// Embed one claimed batch and store its vectors, releasing its
    /// claims, in one transaction: the memories given a vector (not one
    /// another embedder stored first, nor one deleted meanwhile).
    async fn store_embeddings(
        &self,
        enc: &Arc<dyn Encoder>,
        model: &str,
        batch: &[(String, String)],
        until: i64,
    ) -> Result<Vec<MemoryId>, ToolError> {
        let s = &self.semantic;
        let enc2 = Arc::clone(enc);
        let texts: Vec<String> = batch.iter().map(|(_, t)| t.clone()).collect();
        // Timed on the thread that runs it: the model's time, not the
        // wait for a thread. Below the requests' priority when the model
        // runs a batch on threads of its own, which inherit it
        // (`crate::background`); a model on a pool that outlives the call
        // (candle's, the fallback) on the blocking pool as before, or the
        // pool would stay lowered for recall's queries too.
        let work = move || {
            let started = std::time::Instant::now();
            let vectors = embed_each(enc2.as_ref(), &texts);
            (vectors, started.elapsed())
        };
        let (vectors, took) = if enc.batches_on_threads_of_their_own() {
            crate::background::run("zm-embedder", work)
                .await
                .ok_or_else(ToolError::internal)?
        } else {
            tokio::task::spawn_blocking(work).await.map_err(|e| {
                tracing::error!(target: "zm_store", error = %e, "the embedding task failed");
                ToolError::internal()
            })?
        };
        s.embed_micros.fetch_add(micros(took), Ordering::Relaxed);
        let embedded_at = self.now();
        let mut tx = self.write_tx().await?;
        #[cfg(test)]
        if self.semantic.fail_next_store.swap(false, Ordering::Relaxed) {
            return Err(ToolError::internal());
        }
        let mut fresh: Vec<MemoryId> = Vec::with_capacity(batch.len());
        // Refusals this batch stores (a memory kept without a vector);
        // counted once they commit: a batch that fails is embedded again,
        // and a row another embedder wrote first is not this one's.
        let mut refused = 0u64;
        let mut rival: Option<String> = None;
        for ((id, _), v) in batch.iter().zip(&vectors) {
            let replaced = sqlx::query(
                "DELETE FROM memory_vectors WHERE memory_id = $1 AND model <> $2 RETURNING model, embedded_at",
            )
            .bind(id)
            .bind(model)
            .fetch_optional(&mut *tx)
            .await
            .db("replace vector")?;
            if let Some(r) = replaced
                && col::<i64>(&r, "embedded_at")? > (embedded_at - RIVAL_MODEL_MS).max(s.opened_at)
            {
                rival = Some(col(&r, "model")?);
            }
            let written = sqlx::query(
                "INSERT INTO memory_vectors (memory_id, model, vec, embedded_at) \
                 SELECT id, $2, $3, $4 FROM memories WHERE id = $1 \
                 ON CONFLICT (memory_id) DO NOTHING",
            )
            .bind(id)
            .bind(model)
            .bind(v.as_ref().map(Vector::to_bytes))
            .bind(embedded_at)
            .execute(&mut *tx)
            .await
            .db("write vector")?;
            if written.rows_affected() == 1 {
                match v {
                    Some(_) => fresh.push(MemoryId::from_trusted(id)),
                    None => refused += 1,
                }
            }
        }
        release_claims(&mut tx, model, batch, until)
            .await
            .db("release embedding claims")?;
        tx.commit().await.db("commit vectors")?;
        if refused > 0 {
            // Kept without a vector (so not pending again): said here and
            // counted, or a model that refuses everything would look idle.
            tracing::warn!(target: "zm_store", model = %model, refused, of = vectors.len(), "the embedding model refused some memories; recall finds them by full text only (`zero-memory reindex --all` tries again)");
            s.refused.fetch_add(refused, Ordering::Relaxed);
        }
        if let Some(rival) = rival {
            let last = s.rival_warned_at.load(Ordering::Relaxed);
            let now = u64::try_from(embedded_at).unwrap_or(0);
            if (last == 0 || now.saturating_sub(last) >= RIVAL_MODEL_MS.unsigned_abs())
                && s.rival_warned_at
                    .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                tracing::warn!(target: "zm_store", model = %model, other_model = %rival, "replaced vectors another model wrote minutes ago: another instance on this database embeds with a different model, and the two re-embed each other's memories without end; give every instance the same model (ZM_EMBEDDING_MODEL)");
            }
        }
        Ok(fresh)
    }

    /// SQLite reuses the `seq` of the newest memories once they are
    /// deleted (migration 21 counts deletions): when the count moved since
    /// the last look, the marks above which new work is looked for may sit
    /// above new memories, so the pass starts again from the newest.
    async fn restart_after_deletions(&self) -> Result<(), ToolError> {
        let count: i64 = sqlx::query_scalar("SELECT count FROM memory_deletions WHERE id = 1")
            .fetch_one(&self.pool)
            .await
            .db("memory deletions")?;
        let seen = u64::try_from(count).unwrap_or(0).saturating_add(1);
        let s = &self.semantic;
        let before = s.deletions.swap(seen, Ordering::Relaxed);
        if before != 0 && before != seen {
            s.cursor.store(0, Ordering::Relaxed);
            s.top.store(0, Ordering::Relaxed);
            s.settled.store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    /// How many claims of `model` embedders hold (live or lapsed).
    async fn claims_held(&self, model: &str) -> Result<i64, ToolError> {
        sqlx::query_scalar("SELECT COUNT(*) FROM embedding_claims WHERE model = $1")
            .bind(model)
            .fetch_one(&self.pool)
            .await
            .db("embedding claims held")
    }

    /// Claim these memories for this embedder under `model` until
    /// [`CLAIM_MS`] from `now`, in one statement: a memory is claimed
    /// unless another embedder's claim of the same model is still live
    /// (on PostgreSQL a concurrent claim of the same memory waits for this
    /// one and then finds it live). Returns the ids claimed; a memory
    /// deleted meanwhile is not among them. Claims are taken in id order,
    /// so two embedders' overlapping claims queue instead of deadlocking.
    async fn claim_for_embedding(
        &self,
        model: &str,
        batch: &[(String, String)],
        now: i64,
        until: i64,
    ) -> Result<std::collections::HashSet<String>, ToolError> {
        let mut sql = crate::sql::Sql::new(
            "INSERT INTO embedding_claims (memory_id, model, until_at) SELECT m.id, ",
        );
        sql.bind_str(model)
            .push(", ")
            .bind_i64(until)
            .push(" FROM memories m WHERE m.id IN ")
            .bind_list(batch.iter().map(|(id, _)| id.clone()))
            // Still without a vector: another embedder may have written
            // it since this one read the batch.
            .push(" AND NOT EXISTS (SELECT 1 FROM memory_vectors v WHERE v.memory_id = m.id AND v.model = ")
            .bind_str(model)
            .push(")")
            .push(
                " ORDER BY m.id ON CONFLICT (memory_id, model) DO UPDATE SET until_at = excluded.until_at \
                 WHERE embedding_claims.until_at <= ",
            )
            .bind_i64(now)
            .push(" RETURNING memory_id");
        let rows = sql
            .query()
            .fetch_all(&self.pool)
            .await
            .db("claim memories to embed")?;
        rows.iter().map(|r| col(r, "memory_id")).collect()
    }

    /// The near-duplicate sweep by meaning: for each of these freshly
    /// embedded memories written in the last seven days (not brought by
    /// an import), the live memories
    /// of the same owner in the same scope at cosine
    /// [`MEANING_DUPLICATE_FLOOR`] or more become an `unjudged` conflict
    /// (at most three per memory, of its [`MEANING_DUPLICATE_SCAN`]
    /// nearest: a pair refused takes no place), unless the pair already has
    /// a conflict (of any status: a dismissed pair stays dismissed) or a
    /// link, or the owner already has
    /// [`crate::conflicts::UNJUDGED_PENDING_CAP`] pending conflicts, or
    /// the model read either text only in part and their words are not
    /// alike ([`words_alike_beyond_the_window`]).
    /// Returns how many were filed.
    /// The memories are swept [`SWEEP_CHUNK`] at a time: the memories
    /// waiting for a sweep (up to [`UNSWEPT_MAX`] after failures) would
    /// bind more values in one statement than the databases take, and
    /// fail again every time.
    pub async fn file_meaning_duplicates(&self, ids: &[MemoryId]) -> Result<usize, ToolError> {
        #[cfg(test)]
        if self.semantic.fail_next_sweep.swap(false, Ordering::Relaxed) {
            return Err(ToolError::internal());
        }
        let mut filed = 0;
        for chunk in ids.chunks(SWEEP_CHUNK) {
            filed += self.file_meaning_duplicates_of(chunk).await?;
        }
        Ok(filed)
    }

    /// One chunk of [`Store::file_meaning_duplicates`].
    async fn file_meaning_duplicates_of(&self, ids: &[MemoryId]) -> Result<usize, ToolError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let now = self.now();
        // Only recent memories of owners whose review queue has room.
        let mut sql = crate::sql::Sql::new("SELECT m.id AS id FROM memories m WHERE m.id IN ");
        sql.bind_list(ids.iter().map(|id| id.as_str().to_string()));
        // Not what an import brought: old memories, written now. (An
        // import that found the text already there names that memory
        // too, with the import's own time: an agent's memory stays in.)
        sql.push(" AND m.invalidated_at IS NULL AND NOT EXISTS (SELECT 1 FROM imports i WHERE i.memory_id = m.id AND i.created_at = m.created_at) AND m.created_at >= ")
            .bind_i64(now - MEANING_SWEEP_WINDOW_MS)
            .push(&format!(
                " AND {} < ",
                crate::conflicts::live_pending_of("m.owner_id")
            ))
            .bind_i64(crate::conflicts::UNJUDGED_PENDING_CAP);
        let rows = sql
            .query()
            .fetch_all(&self.pool)
            .await
            .db("near-duplicate sweep")?;
        let ids: Vec<MemoryId> = rows
            .iter()
            .map(|r| id_col(r, "id"))
            .collect::<Result<_, _>>()?;
        // A scan of the index per memory: CPU work, on a blocking thread
        // rather than one of the runtime's few workers (requests wait on
        // those).
        let semantic = Arc::clone(&self.semantic);
        // More of the nearest than are filed: the pairs SQL refuses (a
        // conflict or a link already, the same words) take no place.
        // The index is read-locked per memory, not for the whole scan: a
        // refresh waiting to write would otherwise hold up every recall's
        // read behind the lot (a waiting writer goes first).
        let pairs: Vec<(MemoryId, Vec<(MemoryId, f32)>)> = tokio::task::spawn_blocking(move || {
            ids.iter()
                .map(|id| {
                    let near = read(&semantic.index).near_duplicates(
                        id,
                        MEANING_DUPLICATE_FLOOR,
                        MEANING_DUPLICATE_SCAN,
                    );
                    (id.clone(), near)
                })
                .filter(|(_, near)| !near.is_empty())
                .collect()
        })
        .await
        .map_err(|e| crate::db::internal("near-duplicate scan", e))?;
        if pairs.is_empty() {
            return Ok(0);
        }
        // The texts of every memory paired, read at once before the
        // sweep's transaction, and the pairs one of whose texts the model
        // read only in part kept only when their words are alike too
        // (CPU work: on a blocking thread).
        let mut wanted: Vec<String> = Vec::new();
        for (a, near) in &pairs {
            wanted.push(a.as_str().to_string());
            wanted.extend(near.iter().map(|(b, _)| b.as_str().to_string()));
        }
        wanted.sort();
        wanted.dedup();
        let mut sql = crate::sql::Sql::new(&format!(
            "SELECT id, substr(content, 1, {MEANING_WORDS_CHARS}) AS head FROM memories WHERE id IN "
        ));
        sql.bind_list(wanted);
        let mut texts: HashMap<MemoryId, String> = HashMap::new();
        for r in &sql
            .query()
            .fetch_all(&self.pool)
            .await
            .db("near-duplicate texts")?
        {
            texts.insert(id_col(r, "id")?, col(r, "head")?);
        }
        let pairs: Vec<(MemoryId, Vec<(MemoryId, f32)>)> = tokio::task::spawn_blocking(move || {
            pairs
                .into_iter()
                .map(|(a, near)| {
                    let kept = near
                        .into_iter()
                        .filter(|(b, _)| match (texts.get(&a), texts.get(b)) {
                            (Some(ta), Some(tb)) => words_alike_beyond_the_window(ta, tb),
                            // Gone meanwhile: SQL would refuse it.
                            _ => false,
                        })
                        .collect();
                    (a, kept)
                })
                .collect()
        })
        .await
        .map_err(|e| crate::db::internal("near-duplicate words", e))?;
        let mut filed = 0;
        let mut tx = self.write_tx().await?;
        // One sweep at a time across instances: each checks "no conflict
        // for the pair yet" and the owner's pending count before it
        // inserts, which nothing else keeps true between two instances
        // sweeping the same memories (after a model change they embed the
        // same backlog).
        crate::db::lock_across_instances(&mut tx, self.backend, InstanceLock::MeaningSweep)
            .await
            .db("near-duplicate sweep lock")?;
        // Every memory paired held first, once and in id order (as `link`
        // holds its two before it files a contradiction): "no conflict for
        // the pair yet" is then still true when the row goes in, not two
        // pending ones for one pair beside a concurrent `link`
        // (PostgreSQL; SQLite's writes take turns).
        let mut held: Vec<&str> = pairs
            .iter()
            .flat_map(|(a, near)| {
                std::iter::once(a.as_str()).chain(near.iter().map(|(b, _)| b.as_str()))
            })
            .collect();
        held.sort_unstable();
        held.dedup();
        if !held.is_empty() {
            self.hold_memories(&mut tx, &held, None).await?;
        }
        for (a, near) in &pairs {
            let mut filed_here = 0;
            for (b, cosine) in near {
                if filed_here >= MEANING_DUPLICATE_CAP {
                    break;
                }
                let rationale = format!(
                    "Close in meaning (cosine {cosine:.2} under the embedding model): one may restate, refine or contradict the other."
                );
                let one = crate::conflicts::file_unjudged(
                    &mut tx,
                    (a.as_str(), b.as_str()),
                    Some(&rationale),
                    now,
                )
                .await?;
                filed_here += usize::from(one);
            }
            filed += filed_here;
        }
        tx.commit().await.db("commit unjudged conflicts")?;
        self.semantic
            .duplicates
            .fetch_add(u64::try_from(filed).unwrap_or(0), Ordering::Relaxed);
        Ok(filed)
    }

    /// Drop every stored vector (`zero-memory reindex --all`): every live
    /// memory is pending again. Returns how many were dropped.
    pub async fn drop_vectors(&self) -> Result<u64, ToolError> {
        let done = sqlx::query("DELETE FROM memory_vectors")
            .execute(&self.pool)
            .await
            .db("drop vectors")?;
        let mut index = write(&self.semantic.index);
        *index = VectorIndex {
            model: std::mem::take(&mut index.model),
            dims: index.dims,
            ..VectorIndex::default()
        };
        drop(index);
        self.semantic.cursor.store(0, Ordering::Relaxed);
        self.semantic.top.store(0, Ordering::Relaxed);
        Ok(done.rows_affected())
    }

    /// Read the vectors of the current model written since the last
    /// refresh (by any instance) into the index; how many were read.
    pub async fn refresh_vectors(&self) -> Result<usize, ToolError> {
        let mut read_rows = 0;
        let mut after = None;
        while let Some(batch) = self.read_new_vectors(after).await? {
            after = Some(batch.after);
            let mut skipped = Vec::new();
            match self.apply_new_vectors(&batch, &mut skipped)? {
                Some(n) => read_rows += n,
                None => break,
            }
            // Read again now, with their metadata as it is since the
            // change: a fresh vector of this instance's own is swept for
            // near-duplicates right after, through the index.
            read_rows += self
                .load_vectors_of(&batch.model, batch.dims, &skipped)
                .await?;
        }
        Ok(read_rows)
    }

    /// Read the vectors of `ids` (of `model`) and their metadata now, into
    /// the index; how many were read. One whose metadata this instance
    /// re-reads meanwhile is left to the next metadata refresh.
    async fn load_vectors_of(
        &self,
        model: &str,
        dims: usize,
        ids: &[String],
    ) -> Result<usize, ToolError> {
        let mut read_rows = 0;
        for chunk in ids.chunks(500) {
            let epoch = self.semantic.meta_epoch.load(Ordering::SeqCst);
            let mut sql = crate::sql::Sql::new(&format!(
                "SELECT v.vec AS vec, {META_COLUMNS} \
                 FROM memory_vectors v JOIN memories m ON m.id = v.memory_id WHERE v.model = "
            ));
            sql.bind_str(model).push(" AND v.memory_id IN ");
            sql.bind_list(chunk.iter().cloned());
            let rows = sql
                .query()
                .fetch_all(&self.pool)
                .await
                .db("vectors by id")?;
            let mut index = write(&self.semantic.index);
            if index.model != model {
                return Ok(read_rows);
            }
            let touched = self.meta_touched();
            read_rows += index.upsert_rows(
                &rows,
                dims,
                |id| touched.get(id).is_some_and(|&at| at > epoch),
                &mut Vec::new(),
            )?;
        }
        Ok(read_rows)
    }

    /// The first half of [`refresh_vectors`](Self::refresh_vectors): the
    /// next 2,000 vectors of the index's model above `after` (above where
    /// the index stands when `None`); `None` when there are none.
    async fn read_new_vectors(&self, after: Option<i64>) -> Result<Option<NewVectors>, ToolError> {
        let (model, dims, last) = {
            let index = read(&self.semantic.index);
            if index.model.is_empty() {
                return Ok(None);
            }
            (index.model.clone(), index.dims, index.last_vseq)
        };
        let after = after.unwrap_or(match self.backend {
            Backend::Sqlite => last,
            Backend::Postgres => (last - PG_REREAD).max(0),
        });
        let epoch = self.semantic.meta_epoch.load(Ordering::SeqCst);
        let mut sql = crate::sql::Sql::new(&format!(
            "SELECT v.vseq AS vseq, v.vec AS vec, {META_COLUMNS} \
             FROM memory_vectors v JOIN memories m ON m.id = v.memory_id WHERE v.vseq > "
        ));
        sql.bind_i64(after)
            .push(" AND v.model = ")
            .bind_str(&model)
            .push(" ORDER BY v.vseq LIMIT 2000");
        let rows = sql.query().fetch_all(&self.pool).await.db("read vectors")?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut last_read = after;
        for r in &rows {
            last_read = last_read.max(col::<i64>(r, "vseq")?);
        }
        Ok(Some(NewVectors {
            model,
            dims,
            epoch,
            after: last_read,
            rows,
        }))
    }

    /// The second half: put a batch into the index; how many vectors it
    /// held (`None` when the model changed meanwhile). A memory whose
    /// metadata this instance re-read after the batch was read keeps what
    /// the re-read set.
    fn apply_new_vectors(
        &self,
        batch: &NewVectors,
        skipped: &mut Vec<String>,
    ) -> Result<Option<usize>, ToolError> {
        let mut index = write(&self.semantic.index);
        if index.model != batch.model {
            return Ok(None);
        }
        index.last_vseq = index.last_vseq.max(batch.after);
        let touched = self.meta_touched();
        let epoch = batch.epoch;
        index
            .upsert_rows(
                &batch.rows,
                batch.dims,
                |id| touched.get(id).is_some_and(|&at| at > epoch),
                skipped,
            )
            .map(Some)
    }

    /// Re-read the owner, scope, kind, sharing and liveness of every
    /// indexed memory (memories erased meanwhile, or whose vector another
    /// model's replaced, leave the index and its memory), and load
    /// any vector of the model that the index lacks: one committed behind
    /// what [`refresh_vectors`](Self::refresh_vectors) re-reads (on
    /// PostgreSQL, a transaction that stalled while more than
    /// `PG_REREAD` others committed) is found here, not never.
    pub async fn refresh_vector_meta(&self) -> Result<(), ToolError> {
        match self.read_vector_meta().await? {
            Some(rows) => self.apply_vector_meta(rows).await,
            None => Ok(()),
        }
    }

    /// The first half of [`refresh_vector_meta`](Self::refresh_vector_meta):
    /// the metadata of every vector of the index's model, as the table
    /// holds it now (`None` without a model).
    async fn read_vector_meta(&self) -> Result<Option<MetaRows>, ToolError> {
        let (model, dims) = {
            let index = read(&self.semantic.index);
            (index.model.clone(), index.dims)
        };
        if model.is_empty() {
            return Ok(None);
        }
        // Entries added after this point may be missing from the rows read
        // below (committed after them): only the ones before may go.
        let known = read(&self.semantic.index).ids.len();
        let epoch = self.semantic.meta_epoch.load(Ordering::SeqCst);
        let mut sql = crate::sql::Sql::new(&format!(
            "SELECT {META_COLUMNS} FROM memory_vectors v JOIN memories m ON m.id = v.memory_id \
             WHERE v.vec IS NOT NULL AND v.model = "
        ));
        sql.bind_str(&model);
        // Each row read into its `Meta` as it comes: every stored vector's
        // rows and their `Meta`s were held at once, twice the memory.
        let mut rows = sql.query().fetch(&self.pool);
        let mut metas: Vec<Meta> = Vec::with_capacity(known);
        while let Some(row) = futures_util::TryStreamExt::try_next(&mut rows)
            .await
            .db("vector metadata")?
        {
            metas.push(meta_of(&row)?);
        }
        drop(rows);
        Ok(Some(MetaRows {
            model,
            dims,
            known,
            epoch,
            metas,
        }))
    }

    /// The second half: bring the index to `rows` (what changed, what
    /// left, what it lacks), unless this instance changed and re-read
    /// metadata itself since they were read.
    async fn apply_vector_meta(&self, rows: MetaRows) -> Result<(), ToolError> {
        let MetaRows {
            model,
            dims,
            known,
            epoch,
            metas,
        } = rows;
        // Compared under the read lock, which recalls share: what changed,
        // what left, what the index lacks. Every row is read here; only
        // the changes (usually none) take the write lock below, so a
        // recall never waits for 100,000 rows to be applied. CPU work, on
        // a blocking thread rather than one of the runtime's workers.
        // The lock is taken for [`META_CHUNK`] rows at a time: a writer
        // queued behind a hold (new vectors, a forget's re-read) makes
        // every later reader wait too, recalls on the runtime's workers
        // among them, so no hold lasts the whole comparison.
        let semantic = Arc::clone(&self.semantic);
        let compared = tokio::task::spawn_blocking(move || {
            let present: std::collections::HashSet<&MemoryId> =
                metas.iter().map(|m| &m.id).collect();
            // The first `known` entries are the ones there before the rows
            // were read (entries only leave here, and new ones are
            // appended, so the prefix stands between holds); those the
            // rows lack go, found again by id below.
            let mut gone: Vec<MemoryId> = Vec::new();
            let mut from = 0;
            loop {
                let index = read(&semantic.index);
                if index.model != model {
                    return None;
                }
                let to = (from + META_CHUNK).min(known.min(index.ids.len()));
                if from >= to {
                    break;
                }
                gone.extend(
                    index.ids[from..to]
                        .iter()
                        .filter(|id| !present.contains(id))
                        .cloned(),
                );
                from = to;
            }
            drop(present);
            let mut changed: Vec<usize> = Vec::new();
            let mut missing: Vec<String> = Vec::new();
            for (c, chunk) in metas.chunks(META_CHUNK).enumerate() {
                let index = read(&semantic.index);
                if index.model != model {
                    return None;
                }
                for (k, m) in chunk.iter().enumerate() {
                    match index.by_id.get(&m.id) {
                        Some(&i) if index.meta_matches(i, m) => {}
                        Some(_) => changed.push(c * META_CHUNK + k),
                        None => missing.push(m.id.as_str().to_string()),
                    }
                }
            }
            Some((metas, changed, gone, missing, model))
        })
        .await
        .map_err(|e| crate::db::internal("vector metadata comparison", e))?;
        let Some((metas, changed, gone, missing, model)) = compared else {
            return Ok(());
        };
        let changed: Vec<&Meta> = changed.into_iter().map(|k| &metas[k]).collect();
        // What was re-read before these rows is in them: no later pass
        // needs it (pruned on every pass, changes or not, so the map holds
        // only what was re-read since the last one). This holds because the
        // refreshes run one after another (the embedder's task, or
        // `reindex`): a batch of new vectors read before these rows and
        // applied after this prune would find its memories' re-reads gone.
        self.meta_touched().retain(|_, at| *at > epoch);
        if !changed.is_empty() || !gone.is_empty() {
            let mut index = write(&self.semantic.index);
            if index.model != model {
                return Ok(());
            }
            // A change this instance made and re-read since the rows were
            // read is newer than they are: their metadata would undo it.
            let touched = self.meta_touched();
            for m in changed {
                if touched.get(&m.id).is_none_or(|&at| at <= epoch) {
                    index.set_meta(m);
                }
            }
            drop(touched);
            let mut at: Vec<usize> = gone
                .iter()
                .filter_map(|id| index.by_id.get(id).copied())
                .collect();
            at.sort_unstable();
            at.dedup();
            index.remove_at(&at);
        }
        self.load_vectors_of(&model, dims, &missing).await?;
        Ok(())
    }

    /// These memories changed owner, scope, sharing or liveness on this
    /// instance: re-read their metadata now.
    pub(crate) async fn vector_meta_changed(&self, ids: &[MemoryId]) {
        self.reread_meta("m.id", ids.iter().map(|id| id.as_str().to_string()))
            .await;
    }

    /// Memories of these scopes changed owner or sharing on this instance
    /// outside the tool pipeline (a team's handover, sharing or deletion):
    /// re-read their metadata now, as [`vector_meta_changed`](Self::vector_meta_changed)
    /// does for a tool's writes.
    pub(crate) async fn vector_meta_changed_in_scopes(&self, scopes: &[String]) {
        self.reread_meta("m.scope", scopes.iter().cloned()).await;
    }

    /// Re-read the metadata of the memories whose `column` is one of
    /// `values`. A failure only leaves the index as stale as the periodic
    /// refresh allows: it is logged, not returned (the write committed).
    async fn reread_meta(&self, column: &str, values: impl ExactSizeIterator<Item = String>) {
        if values.len() == 0 || read(&self.semantic.index).entries.is_empty() {
            return;
        }
        let epoch = self.semantic.meta_epoch.fetch_add(1, Ordering::SeqCst) + 1;
        let mut sql = crate::sql::Sql::new(&format!(
            "SELECT {META_COLUMNS} FROM memories m WHERE {column} IN "
        ));
        sql.bind_list(values);
        let metas: Vec<Meta> = match sql.query().fetch_all(&self.pool).await {
            Ok(rows) => rows.iter().filter_map(|r| meta_of(r).ok()).collect(),
            Err(e) => {
                tracing::warn!(target: "zm_store", error = %e, "re-reading vector metadata failed");
                return;
            }
        };
        // The index's write lock waits for the recalls reading it (a
        // scan of every vector each): taken on a blocking thread, not a
        // runtime worker the other requests need meanwhile.
        let store = self.clone();
        let applied = tokio::task::spawn_blocking(move || {
            let mut index = write(&store.semantic.index);
            let mut touched = store.meta_touched();
            for m in &metas {
                touched.insert(m.id.clone(), epoch);
                index.set_meta(m);
            }
        })
        .await;
        if let Err(e) = applied {
            tracing::error!(target: "zm_store", error = %e, "applying re-read vector metadata failed");
        }
    }

    /// The memories this instance re-read the metadata of, with the epoch
    /// of the re-read. Taken after the index's lock where both are held.
    fn meta_touched(&self) -> std::sync::MutexGuard<'_, HashMap<MemoryId, u64>> {
        self.semantic
            .meta_touched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The query's vector, when a model is set (`None` in lexical mode,
    /// while the model loads, or when the model refuses the text).
    pub(crate) async fn embed_query(&self, text: &str) -> Option<Vector> {
        let enc = self.encoder()?;
        let text: String = text.chars().take(EMBED_CHARS).collect();
        if text.trim().is_empty() {
            return None;
        }
        // Kept vectors (the sweep only): a kept one is the answer; else
        // the text is the key to keep this one under.
        let memo_key = match read(&self.semantic.query_memo).as_ref() {
            Some(memo) => match memo.get(&text) {
                Some(v) => return Some(v.clone()),
                None => Some(text.clone()),
            },
            None => None,
        };
        // A slot first (held until the forward pass ends, even if the
        // recall is dropped meanwhile). Timed on the blocking thread: the
        // model's time, not the wait for a slot or a thread.
        let slot = Arc::clone(&self.semantic.query_slots.0)
            .acquire_owned()
            .await
            .ok()?;
        let joined = tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let v = enc.embed(&[text.as_str()]);
            drop(slot);
            (v, started.elapsed())
        })
        .await;
        let s = &self.semantic;
        s.queries.fetch_add(1, Ordering::Relaxed);
        let refused = || {
            // Counted, and said once per process at warn: a model that
            // refuses queries turns hybrid recall into full text quietly.
            if s.queries_refused.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!(target: "zm_store", "the model refused a query (an error, no vector or a panic): that recall ran on full text alone; zm_query_embeddings_refused_total counts them");
            }
        };
        let (v, took) = match joined {
            Ok(done) => done,
            Err(e) => {
                // The model panicked: a refusal like any other to the
                // caller (full text alone), counted as one.
                tracing::error!(target: "zm_store", error = %e, "the query embedding task failed");
                refused();
                return None;
            }
        };
        s.query_micros.fetch_add(micros(took), Ordering::Relaxed);
        match v.map(|v| v.first().and_then(|v| Vector::of_output(v))) {
            Ok(Some(v)) => {
                if let (Some(key), Some(memo)) =
                    (memo_key, write(&self.semantic.query_memo).as_mut())
                {
                    memo.insert(key, v.clone());
                }
                Some(v)
            }
            Ok(None) => {
                refused();
                None
            }
            Err(e) => {
                tracing::debug!(target: "zm_store", error = %e, "query not embedded");
                refused();
                None
            }
        }
    }

    /// The nearest vectors to `query` among memories `reader` could read
    /// in `set` as of the last refresh (a pre-filter: the caller checks
    /// visibility in SQL). Run in place on the recall's worker (3.2 ms at
    /// 100,000 vectors): handing it to a blocking thread cost each recall
    /// more than the scan at 10,000 (`spawn_blocking` 0.5–1.2 ms,
    /// `block_in_place` about 0.4 ms, hybrid p50, two cores; see
    /// BENCHMARKS.md). The index's write lock is never held long (the
    /// sweep read-locks it one memory at a time), and no read hold is
    /// either (the metadata comparison takes it [`META_CHUNK`] rows at a
    /// time: a writer queued behind a long read hold would make this scan
    /// wait for both), so the scan does not queue behind a long hold.
    pub(crate) fn nearest(
        &self,
        query: &Vector,
        reader: &Reader<'_>,
        set: &ReadSet,
        limit: usize,
    ) -> Vec<(MemoryId, f32)> {
        let started = std::time::Instant::now();
        let found = read(&self.semantic.index).nearest(query, reader, set, limit);
        tracing::debug!(
            target: "zm_store::ranked",
            scan_us = started.elapsed().as_micros(),
            "dense scan"
        );
        found
    }

    /// For the benchmark: of the exact scan's first `depth` neighbours of
    /// `text` among everything `user_id` reads, how many are among the
    /// first `depth` of the search recall's dense leg runs (which asks for
    /// [`DENSE_PREFILTER`](crate::search::DENSE_PREFILTER)); `None` in
    /// lexical mode. Always all of them while the index holds at most
    /// [`EXACT_SCAN_MAX`] vectors.
    #[doc(hidden)]
    pub async fn dense_agreement(
        &self,
        user_id: &str,
        text: &str,
        depth: usize,
    ) -> Option<(usize, usize)> {
        let query = self.embed_query(text).await?;
        let member_scopes = self.member_scopes(user_id).await.ok()?;
        let reader = Reader {
            user: user_id,
            member_scopes: &member_scopes,
            kinds: None,
        };
        let index = read(&self.semantic.index);
        let exact = index.search(&query, &reader, &ReadSet::All, depth, false);
        let found: HashSet<MemoryId> = index
            .nearest(
                &query,
                &reader,
                &ReadSet::All,
                crate::search::DENSE_PREFILTER.max(depth),
            )
            .into_iter()
            .take(depth)
            .map(|(id, _)| id)
            .collect();
        let agree = exact.iter().filter(|(id, _)| found.contains(id)).count();
        Some((agree, exact.len()))
    }

    /// When the newest memory was written (epoch ms), for benchmarks that
    /// reopen a database written on a moved store clock and move it the
    /// same way.
    #[doc(hidden)]
    pub async fn newest_memory_ms(&self) -> Result<Option<i64>, ToolError> {
        let row = sqlx::query("SELECT MAX(created_at) AS newest FROM memories")
            .fetch_one(&self.pool)
            .await
            .db("newest memory")?;
        col(&row, "newest")
    }

    /// Whether this instance warned that it replaced vectors another model
    /// wrote within the last ten minutes (another instance embedding with
    /// a different model), for the tests.
    #[doc(hidden)]
    pub fn warned_of_a_rival_model(&self) -> bool {
        self.semantic.rival_warned_at.load(Ordering::Relaxed) != 0
    }

    /// For the quality benchmark's sweep: fuse with these constants
    /// instead of [`Fusion::DEFAULT`](crate::search::Fusion::DEFAULT).
    #[doc(hidden)]
    pub fn set_fusion(&self, fusion: crate::search::Fusion) {
        *write(&self.semantic.fusion) = fusion;
    }

    /// For the quality benchmark's sweep: keep every query's vector by its
    /// text from now on, so asking it again does not embed it again.
    #[doc(hidden)]
    pub fn keep_query_vectors(&self) {
        write(&self.semantic.query_memo).get_or_insert_with(HashMap::new);
    }

    /// The fusion's constants in force.
    pub(crate) fn fusion(&self) -> crate::search::Fusion {
        *read(&self.semantic.fusion)
    }

    /// Is memory `id` in this instance's vector index?
    pub fn is_embedded(&self, id: &str) -> bool {
        read(&self.semantic.index)
            .by_id
            .contains_key(&MemoryId::from_trusted(id))
    }

    /// The cosine of `query` and memory `id`'s vector, when indexed.
    pub(crate) fn cosine_of(&self, query: &Vector, id: &MemoryId) -> Option<f32> {
        let index = read(&self.semantic.index);
        let i = *index.by_id.get(id)?;
        (query.dims() == index.dims).then(|| index.cosine_at(i, query))
    }
}

/// Release this embedder's claims on `batch` (those still holding its
/// `until`: a claim that lapsed and was taken over is the other
/// embedder's to release), one memory at a time in id order, the order
/// claims are taken in: a claim waiting on one of these rows holds none
/// this release waits for.
async fn release_claims(
    conn: &mut sqlx::AnyConnection,
    model: &str,
    batch: &[(String, String)],
    until: i64,
) -> Result<(), sqlx::Error> {
    let mut ids: Vec<&str> = batch.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort_unstable();
    for id in ids {
        sqlx::query(
            "DELETE FROM embedding_claims WHERE memory_id = $1 AND model = $2 AND until_at = $3",
        )
        .bind(id)
        .bind(model)
        .bind(until)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Whether the model surely read all of `text`: at most
/// [`MEANING_WHOLE_CHARS`] characters, one outside ASCII or a punctuation
/// mark counted as four (in scripts written without spaces a character is
/// about a token, and WordPiece makes every mark a token of its own:
/// `10.0.0.1` is seven), a digit as two (it cuts numbers finely).
fn read_whole(text: &str) -> bool {
    let mut weight = 0usize;
    for c in text.chars() {
        weight += if c.is_ascii_punctuation() || !c.is_ascii() {
            4
        } else if c.is_ascii_digit() {
            2
        } else {
            1
        };
        if weight > MEANING_WHOLE_CHARS {
            return false;
        }
    }
    true
}

/// Whether two texts close in meaning (their vectors) are alike beyond
/// what the model read: yes when it read both whole ([`read_whole`]);
/// otherwise only when their words are alike too (TF-IDF cosine of their
/// first [`MEANING_WORDS_CHARS`] characters at [`MEANING_WORDS_FLOOR`] or
/// more): two long texts sharing a preamble are close in meaning by their
/// first few hundred characters alone. Never when either has no word at
/// all (`🚀`, `👍✅`): the model reads such a text as unknown tokens, so
/// every one of them has about the same vector, which says nothing of
/// what it means (a query with no word is not embedded, for the same
/// reason).
fn words_alike_beyond_the_window(a: &str, b: &str) -> bool {
    if crate::fts::query_terms(a).is_empty() || crate::fts::query_terms(b).is_empty() {
        return false;
    }
    if read_whole(a) && read_whole(b) {
        return true;
    }
    !crate::similarity::rank_similar(a, &[(0, b)], MEANING_WORDS_FLOOR, 1).is_empty()
}

/// Embed each text; `None` for a text the model refuses (or panics on). A
/// batch the model refuses as a whole is retried one text at a time, so
/// one bad text costs only its own vector.
fn embed_each(enc: &dyn Encoder, texts: &[String]) -> Vec<Option<Vector>> {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    if let Ok(Ok(vs)) = catch_unwind(AssertUnwindSafe(|| enc.embed(&refs)))
        && vs.len() == texts.len()
    {
        return vs.iter().map(|v| Vector::of_output(v)).collect();
    }
    refs.iter()
        .map(
            |t| match catch_unwind(AssertUnwindSafe(|| enc.embed(&[*t]))) {
                Ok(Ok(v)) if v.len() == 1 => Vector::of_output(&v[0]),
                _ => None,
            },
        )
        .collect()
}

/// How many rows the vector metadata comparison reads under one hold of
/// the index's read lock (about a millisecond of lookups; a handful in
/// unit tests, so that theirs take several holds).
const META_CHUNK: usize = if cfg!(test) { 3 } else { 4096 };

#[cfg(test)]
mod tests {
    use super::*;

    /// A model that answers NaN for one text, zeros for another, and a
    /// unit vector otherwise; a batch holding a bad text fails as a whole
    /// only when asked to (`strict`).
    struct Odd {
        strict: bool,
    }

    impl Encoder for Odd {
        fn model(&self) -> &str {
            "test-odd"
        }
        fn dims(&self) -> usize {
            4
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, zm_embed::EmbedError> {
            if self.strict && texts.len() > 1 && texts.contains(&"nan") {
                return Err(zm_embed::EmbedError::Inference(
                    "a bad text in the batch".into(),
                ));
            }
            Ok(texts
                .iter()
                .map(|t| match *t {
                    "nan" => vec![f32::NAN, 0.5, 0.5, 0.5],
                    "inf" => vec![f32::INFINITY, 0.0, 0.0, 0.0],
                    "zero" => vec![0.0; 4],
                    "panic" => panic!("the test model panics on this text"),
                    _ => vec![0.5; 4],
                })
                .collect())
        }
    }

    /// A pair close in meaning is filed on its vectors alone only when the
    /// model read both texts whole; otherwise their words must be alike
    /// too.
    #[test]
    fn texts_past_the_window_must_be_alike_by_words_too() {
        assert!(read_whole(&"a".repeat(MEANING_WHOLE_CHARS)));
        assert!(!read_whole(&"a".repeat(MEANING_WHOLE_CHARS + 1)));
        // A character outside ASCII weighs four, as does a punctuation
        // mark (a token of its own); a digit two.
        assert!(!read_whole(&"é".repeat(MEANING_WHOLE_CHARS / 4 + 1)));
        assert!(read_whole(&"é".repeat(MEANING_WHOLE_CHARS / 4)));
        assert!(!read_whole(&"10.0.0.1 ".repeat(18)));
        assert!(read_whole(&"10.0.0.1 ".repeat(17)));
        // Texts with no word at all are never paired by their vectors:
        // the model reads each as unknown tokens, all alike.
        assert!(!words_alike_beyond_the_window("🚀", "👍✅"));
        assert!(!words_alike_beyond_the_window(
            "🚀",
            "The cache is warmed at boot."
        ));
        // Two short texts: their vectors decide.
        assert!(words_alike_beyond_the_window(
            "The cache is warmed at boot.",
            "Nightly jobs rotate the logs."
        ));
        // A shared preamble, bodies of their own: not alike.
        let preamble =
            "This runbook covers the payment gateway and its escalation paths. ".repeat(9);
        let body = |w: &str| {
            (0..190)
                .map(|i| format!("{w}{i}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let (one, two) = (
            format!("{preamble}{}", body("north")),
            format!("{preamble}{}", body("south")),
        );
        assert!(!words_alike_beyond_the_window(&one, &two));
        // A long text and its copy with one word changed: alike.
        let edited = one.replacen("north7 ", "west7 ", 1);
        assert!(words_alike_beyond_the_window(&one, &edited));
        // A long text beside a short one: by words.
        assert!(!words_alike_beyond_the_window(
            &one,
            "The cache is warmed at boot."
        ));
    }

    /// What a model gives that is no vector — a NaN or infinite coordinate,
    /// all zeros — is refused for that text alone, whether the batch
    /// answered as a whole or one text at a time.
    #[test]
    fn a_text_the_model_answers_with_no_vector_is_refused_alone() {
        let texts: Vec<String> = ["ok", "nan", "inf", "zero", "fine"]
            .iter()
            .map(ToString::to_string)
            .collect();
        for strict in [false, true] {
            let got = embed_each(&Odd { strict }, &texts);
            let kept: Vec<bool> = got.iter().map(Option::is_some).collect();
            assert_eq!(kept, [true, false, false, false, true], "strict {strict}");
            let v = got[0].as_ref().unwrap();
            assert!((v.cosine(got[4].as_ref().unwrap()) - 1.0).abs() < 0.02);
        }
    }

    /// A deterministic unit vector of `dims` coordinates.
    fn random_unit(seed: &mut u64, dims: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..dims)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                #[allow(clippy::cast_precision_loss)]
                let u = (*seed >> 40) as f32 / (1u64 << 24) as f32;
                u - 0.5
            })
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / n).collect()
    }

    /// An index of `n` vectors, owned by `alice` but every `stride`-th by
    /// `bob`.
    fn index(n: usize, stride: usize, seed: &mut u64) -> (VectorIndex, Vec<Vec<f32>>) {
        let mut index = VectorIndex {
            model: "test".into(),
            dims: 384,
            ..VectorIndex::default()
        };
        let mut raw = Vec::with_capacity(n);
        for i in 0..n {
            let v = random_unit(seed, 384);
            let owner = if i.is_multiple_of(stride) {
                "bob"
            } else {
                "alice"
            };
            index.upsert(
                live_meta(&format!("mem_{i:06}"), owner, "personal", "fact", false),
                &Vector::quantize(&v),
            );
            raw.push(v);
        }
        (index, raw)
    }

    /// A live memory's metadata.
    fn live_meta(id: &str, owner: &str, scope: &str, kind: &str, shared: bool) -> Meta {
        Meta {
            id: MemoryId::from_trusted(id),
            owner: owner.into(),
            scope: scope.into(),
            kind: kind.into(),
            shared,
            live: true,
        }
    }

    /// A reader who is a member of no scope: they read their own memories.
    fn own(user: &str) -> Reader<'_> {
        Reader {
            user,
            member_scopes: &[],
            kinds: None,
        }
    }

    /// `v` moved a little: a query whose nearest stored vector is `v`.
    fn near(v: &[f32], seed: &mut u64) -> Vector {
        let noise = random_unit(seed, v.len());
        let mixed: Vec<f32> = v.iter().zip(&noise).map(|(a, b)| a + 0.5 * b).collect();
        Vector::quantize(&mixed)
    }

    #[test]
    fn the_shortlist_finds_the_nearest_vector_and_only_readable_ones() {
        let mut seed = 0x9E37_79B9_7F4A_7C15;
        let n = EXACT_SCAN_MAX + 5_000;
        let (index, raw) = index(n, 40, &mut seed);
        for target in [1usize, 777, 12_345, n - 1] {
            let query = near(&raw[target], &mut seed);
            let exact = index.search(&query, &own("alice"), &ReadSet::All, 10, false);
            let approx = index.nearest(&query, &own("alice"), &ReadSet::All, 10);
            let want = MemoryId::from_trusted(format!("mem_{target:06}"));
            assert_eq!(exact[0].0, want, "the exact scan's nearest");
            assert_eq!(approx[0].0, want, "the shortlist keeps the nearest");
            assert_eq!(approx[0].1.to_bits(), exact[0].1.to_bits());
            assert_eq!(approx.len(), 10);
        }
        // Bob reads only his own: every 40th vector.
        let query = near(&raw[40 * 7], &mut seed);
        let bob = index.nearest(&query, &own("bob"), &ReadSet::All, 200);
        assert_eq!(
            bob[0].0,
            MemoryId::from_trusted(format!("mem_{:06}", 40 * 7))
        );
        assert!(bob.iter().all(|(id, _)| {
            let i: usize = id.as_str()["mem_".len()..].parse().unwrap_or(1);
            i.is_multiple_of(40)
        }));
        // Fewer readable (Bob's 625) than the shortlist (10 × 70): every
        // one is scored, so the result is the exact scan's.
        let exact = index.search(&query, &own("bob"), &ReadSet::All, 70, false);
        let approx = index.nearest(&query, &own("bob"), &ReadSet::All, 70);
        assert_eq!(exact.len(), 70);
        assert_eq!(approx, exact);
        // Nobody else reads anything.
        assert!(
            index
                .nearest(&query, &own("carol"), &ReadSet::All, 10)
                .is_empty()
        );
    }

    /// Removing entries keeps every other one whole: its position in
    /// `by_id`, its coordinates, sign bits and scale, found as before.
    #[test]
    fn removed_entries_leave_the_index_and_the_rest_stay_findable() {
        let mut seed = 0x0123_4567_89AB_CDEF;
        let (mut index, raw) = index(300, 7, &mut seed);
        let gone: Vec<usize> = vec![0, 5, 6, 150, 298, 299];
        assert_eq!(index.remove_at(&gone), 6);
        assert_eq!(index.ids.len(), 294);
        assert_eq!(index.entries.len(), 294);
        assert_eq!(index.scales.len(), 294);
        assert_eq!(index.codes.len(), 294 * 384);
        assert_eq!(index.signs.len(), 294 * 6);
        assert_eq!(index.by_id.len(), 294);
        for (i, v) in raw.iter().enumerate() {
            let id = MemoryId::from_trusted(format!("mem_{i:06}"));
            if gone.contains(&i) {
                assert!(!index.by_id.contains_key(&id), "{id} removed");
                continue;
            }
            let at = index.by_id[&id];
            assert_eq!(index.ids[at], id);
            let q = Vector::quantize(v);
            assert_eq!(index.code(at), q.values(), "{id}'s coordinates");
            assert_eq!(index.scales[at].to_bits(), q.scale().to_bits());
            assert_eq!(
                &index.signs[at * 6..(at + 1) * 6],
                sign_bits(q.values()).as_slice()
            );
            let owner = if i.is_multiple_of(7) { "bob" } else { "alice" };
            let found = index.search(&near(v, &mut seed), &own(owner), &ReadSet::All, 1, false);
            assert_eq!(found[0].0, id, "the nearest of a query near {id}");
        }
    }

    #[test]
    fn a_shared_memory_is_a_candidate_only_for_members_of_its_scope() {
        let mut index = VectorIndex {
            model: "m".into(),
            dims: 8,
            ..VectorIndex::default()
        };
        let mut seed = 0x0123_4567_89AB_CDEF;
        let v = random_unit(&mut seed, 8);
        let put = |index: &mut VectorIndex, id: &str, owner: &str, scope: &str, shared: bool| {
            index.upsert(
                live_meta(id, owner, scope, "fact", shared),
                &Vector::quantize(&v),
            );
        };
        put(&mut index, "mem_mine", "bob", "personal", false);
        put(&mut index, "mem_team_x", "dave", "team.x", true);
        put(&mut index, "mem_team_y", "erin", "team.y", true);
        put(&mut index, "mem_private", "alice", "team.x", false);
        let query = Vector::quantize(&v);
        let ids = |member_scopes: &[String]| {
            let reader = Reader {
                user: "bob",
                member_scopes,
                kinds: None,
            };
            let mut ids: Vec<String> = index
                .search(&query, &reader, &ReadSet::All, 10, false)
                .into_iter()
                .map(|(id, _)| id.as_str().to_string())
                .collect();
            ids.sort();
            ids
        };
        assert_eq!(
            ids(&[]),
            ["mem_mine"],
            "a member of nothing reads their own"
        );
        assert_eq!(
            ids(&["team.x".to_string()]),
            ["mem_mine", "mem_team_x"],
            "team.x's shared memory, not its private one, nor team.y's"
        );
        assert_eq!(
            ids(&["team.x".to_string(), "team.unknown".to_string()]),
            ["mem_mine", "mem_team_x"],
            "a scope the index has never seen changes nothing"
        );
    }

    #[test]
    fn a_memory_of_a_kind_not_asked_for_takes_no_place() {
        let mut index = VectorIndex {
            model: "m".into(),
            dims: 16,
            ..VectorIndex::default()
        };
        let mut seed = 0xDEAD_BEEF_0000_0001;
        let query = random_unit(&mut seed, 16);
        let put = |index: &mut VectorIndex, id: String, kind: &str, v: &[f32]| {
            index.upsert(
                live_meta(&id, "bob", "personal", kind, false),
                &Vector::quantize(v),
            );
        };
        // 300 facts nearer the query than the one decision.
        for i in 0..300 {
            let noise = random_unit(&mut seed, 16);
            let v: Vec<f32> = query.iter().zip(&noise).map(|(q, n)| q + 0.1 * n).collect();
            put(&mut index, format!("mem_fact{i:03}"), "fact", &v);
        }
        let noise = random_unit(&mut seed, 16);
        let far: Vec<f32> = query.iter().zip(&noise).map(|(q, n)| q + 0.8 * n).collect();
        put(&mut index, "mem_decision".into(), "decision", &far);
        let q = Vector::quantize(&query);
        let ask = |kinds: Option<&[MemoryKind]>| {
            let reader = Reader {
                user: "bob",
                member_scopes: &[],
                kinds,
            };
            index.search(&q, &reader, &ReadSet::All, 200, false)
        };
        let all = ask(None);
        assert_eq!(all.len(), 200);
        assert!(
            all.iter().all(|(id, _)| id.as_str() != "mem_decision"),
            "every kind: the decision is not among the nearest 200"
        );
        let decisions = ask(Some(&[MemoryKind::Decision]));
        assert_eq!(
            decisions
                .iter()
                .map(|(id, _)| id.as_str())
                .collect::<Vec<_>>(),
            ["mem_decision"],
            "decisions only: the facts take no place"
        );
    }

    /// A vector committed behind what `refresh_vectors` re-reads (an index
    /// that has moved past it) is loaded by the metadata refresh.
    #[tokio::test]
    async fn a_vector_the_index_missed_is_loaded_by_the_metadata_refresh() {
        use serde_json::json;
        use zm_contracts::ToolName;
        let Some(Ok(model)) = zm_embed::bundled() else {
            return;
        };
        for (label, _dir, store) in crate::testing::stores().await {
            let caller = crate::testing::test_caller(&store, "missed").await;
            let out = crate::ToolService::new(store.clone())
                .call(
                    &caller,
                    ToolName::parse("remember").unwrap(),
                    &json!({"content": "The nightly backup goes to a bucket in Oslo.", "kind": "fact", "scope": "personal"}),
                )
                .await
                .unwrap()
                .to_json();
            let id = out["memory_id"].as_str().unwrap().to_string();
            embed_with(&store, &model, &id, label).await;
            // The index forgets every vector, and its place in the table
            // moves past what `refresh_vectors` re-reads (PostgreSQL re-reads
            // the last PG_REREAD): as an index that missed these rows.
            {
                let mut index = write(&store.semantic.index);
                *index = VectorIndex {
                    model: std::mem::take(&mut index.model),
                    dims: index.dims,
                    last_vseq: index.last_vseq + PG_REREAD,
                    ..VectorIndex::default()
                };
            }
            store.refresh_vectors().await.unwrap();
            assert!(
                !store.is_embedded(&id),
                "[{label}] the rows are behind the index's place"
            );
            store.refresh_vector_meta().await.unwrap();
            assert!(
                store.is_embedded(&id),
                "[{label}] found by the metadata refresh"
            );
            // Forgotten by another instance: the refresh marks it, and
            // marks it live again once it is restored.
            let live = |store: &Store| {
                let index = read(&store.semantic.index);
                index.entries[index.by_id[&MemoryId::from_trusted(&id)]].live
            };
            for (sql, want) in [
                (
                    "UPDATE memories SET invalidated_at = 1 WHERE id = $1",
                    false,
                ),
                (
                    "UPDATE memories SET invalidated_at = NULL WHERE id = $1",
                    true,
                ),
            ] {
                sqlx::query(sql)
                    .bind(&id)
                    .execute(&store.pool)
                    .await
                    .unwrap();
                store.refresh_vector_meta().await.unwrap();
                assert_eq!(live(&store), want, "[{label}] {sql}");
            }
            // Its vector gone from the table (as another model's vector
            // replaces it, or an erasure takes the memory): the refresh
            // takes it out of the index, not only out of the results.
            sqlx::query("DELETE FROM memory_vectors WHERE memory_id = $1")
                .bind(&id)
                .execute(&store.pool)
                .await
                .unwrap();
            store.refresh_vector_meta().await.unwrap();
            assert!(!store.is_embedded(&id), "[{label}] left the index");
        }
    }

    /// The metadata refresh compares its rows a chunk at a time
    /// ([`META_CHUNK`], 3 here): a change, and a vector gone from the
    /// table, in any chunk is applied to its own memory.
    #[tokio::test]
    async fn the_metadata_refresh_applies_changes_in_every_chunk() {
        let Some(Ok(model)) = zm_embed::bundled() else {
            return;
        };
        for (label, _dir, store) in crate::testing::stores().await {
            let caller = crate::testing::test_caller(&store, "chunks").await;
            let tools = crate::ToolService::new(store.clone());
            let mut ids = Vec::new();
            for n in 0..3 * META_CHUNK + 1 {
                let id = remember_fact(
                    &tools,
                    &caller,
                    format!("Deployment window number {n} is on a weekday."),
                )
                .await;
                embed_with(&store, &model, &id, label).await;
                ids.push(id);
            }
            // Another instance forgets some and drops others' vectors.
            let forgotten = [1, META_CHUNK + 1, 3 * META_CHUNK];
            let dropped = [2, 2 * META_CHUNK + 2];
            for &k in &forgotten {
                sqlx::query("UPDATE memories SET invalidated_at = 1 WHERE id = $1")
                    .bind(&ids[k])
                    .execute(&store.pool)
                    .await
                    .unwrap();
            }
            for &k in &dropped {
                sqlx::query("DELETE FROM memory_vectors WHERE memory_id = $1")
                    .bind(&ids[k])
                    .execute(&store.pool)
                    .await
                    .unwrap();
            }
            store.refresh_vector_meta().await.unwrap();
            let index = read(&store.semantic.index);
            for (k, id) in ids.iter().enumerate() {
                let at = index.by_id.get(&MemoryId::from_trusted(id)).copied();
                if dropped.contains(&k) {
                    assert_eq!(at, None, "[{label}] {k}: its vector left");
                } else {
                    let live = index.entries[at.expect("still indexed")].live;
                    assert_eq!(live, !forgotten.contains(&k), "[{label}] {k}: live");
                }
            }
        }
    }

    /// A refresh whose rows were read before this instance changed a
    /// memory (and re-read it at once) leaves the change as it is: its
    /// older rows would have made a forgotten memory live again by
    /// meaning, or a shared one private, until the next refresh.
    #[tokio::test]
    async fn a_refresh_read_before_a_change_does_not_undo_it() {
        let Some(Ok(model)) = zm_embed::bundled() else {
            return;
        };
        for (label, _dir, store) in crate::testing::stores().await {
            let caller = crate::testing::test_caller(&store, "epoch").await;
            let tools = crate::ToolService::new(store.clone());
            let id = remember_fact(
                &tools,
                &caller,
                "The staging cluster is rebuilt every Sunday.".into(),
            )
            .await;
            let other = remember_fact(
                &tools,
                &caller,
                "The release train leaves on Tuesdays.".into(),
            )
            .await;
            embed_with(&store, &model, &id, label).await;
            embed_with(&store, &model, &other, label).await;
            let live_of = |store: &Store, id: &str| {
                let index = read(&store.semantic.index);
                index.entries[index.by_id[&MemoryId::from_trusted(id)]].live
            };
            let live = |store: &Store| live_of(store, &id);
            // Another instance forgets `other` (in SQL, not re-read here):
            // the refresh's rows carry that change, and it is applied.
            sqlx::query("UPDATE memories SET invalidated_at = 1 WHERE id = $1")
                .bind(&other)
                .execute(&store.pool)
                .await
                .unwrap();
            let stale = store.read_vector_meta().await.unwrap().expect("a model");
            tools
                .call(
                    &caller,
                    zm_contracts::ToolName::Forget,
                    &serde_json::json!({"memory_id": id}),
                )
                .await
                .unwrap();
            assert!(!live(&store), "[{label}] re-read at once");
            store.apply_vector_meta(stale).await.unwrap();
            assert!(
                !live(&store),
                "[{label}] rows read before the forget left it forgotten"
            );
            assert!(
                !live_of(&store, &other),
                "[{label}] and applied what another instance changed"
            );
            // The next refresh reads rows after it, and agrees.
            store.refresh_vector_meta().await.unwrap();
            assert!(!live(&store), "[{label}]");
        }
    }

    /// New vectors read before this instance changed one of their
    /// memories (and re-read it at once) do not undo the change: a
    /// vector another instance wrote, read here before the memory was
    /// forgotten here, does not enter the index as live.
    #[tokio::test]
    async fn new_vectors_read_before_a_change_do_not_undo_it() {
        let Some(Ok(model)) = zm_embed::bundled() else {
            return;
        };
        // SQLite alone: the race is the index's, the same on both
        // backends, and a second embedder on the shared PostgreSQL test
        // database would embed every other test's memories.
        let (dir, store) = crate::testing::sqlite_store().await;
        let label = "sqlite";
        {
            let caller = crate::testing::test_caller(&store, "newvec").await;
            let tools = crate::ToolService::new(store.clone());
            let first =
                remember_fact(&tools, &caller, "The nightly backup runs at 02:00.".into()).await;
            embed_with(&store, &model, &first, label).await;
            let id = remember_fact(
                &tools,
                &caller,
                "The office closes at six on Fridays.".into(),
            )
            .await;
            // Another instance embeds it: its vector is in the table, not
            // in this index.
            let other = Store::open(&crate::sqlite_url(&dir.path().join("zm.db")))
                .await
                .unwrap();
            other.set_encoder(Arc::clone(&model));
            while other.embed_pending(64).await.unwrap() > 0 {}
            assert!(!store.is_embedded(&id), "[{label}] not here yet");
            let batch = store
                .read_new_vectors(None)
                .await
                .unwrap()
                .expect("the new vector");
            tools
                .call(
                    &caller,
                    zm_contracts::ToolName::Forget,
                    &serde_json::json!({"memory_id": id}),
                )
                .await
                .unwrap();
            let mut skipped = Vec::new();
            store.apply_new_vectors(&batch, &mut skipped).unwrap();
            assert_eq!(skipped, vec![id.clone()], "[{label}] left to be read again");
            let live = |store: &Store| {
                let index = read(&store.semantic.index);
                index
                    .by_id
                    .get(&MemoryId::from_trusted(&id))
                    .map(|&i| index.entries[i].live)
            };
            assert_ne!(
                live(&store),
                Some(true),
                "[{label}] a forgotten memory made live by older rows"
            );
            // Read again, as `refresh_vectors` does next: as it is now.
            let read_again = store
                .load_vectors_of(&batch.model, batch.dims, &skipped)
                .await
                .unwrap();
            assert_eq!(read_again, 1, "[{label}]");
            assert_eq!(live(&store), Some(false), "[{label}]");
            store.refresh_vector_meta().await.unwrap();
            assert_eq!(
                live(&store),
                Some(false),
                "[{label}] and the refresh agrees"
            );
            other.close().await;
        }
    }

    /// Set `model` and embed until memory `id` is in the index.
    async fn embed_with(store: &Store, model: &Arc<dyn Encoder>, id: &str, label: &str) {
        store.set_encoder(Arc::clone(model));
        for _ in 0..200 {
            if store.is_embedded(id) {
                break;
            }
            if store.embed_pending(64).await.unwrap() == 0 {
                store.refresh_vectors().await.unwrap();
            }
        }
        assert!(store.is_embedded(id), "[{label}] embedded");
    }

    /// `remember` a personal fact through the tool service; its id.
    async fn remember_fact(
        tools: &crate::ToolService,
        caller: &crate::Caller,
        text: String,
    ) -> String {
        tools
            .call(
                caller,
                zm_contracts::ToolName::Remember,
                &serde_json::json!({"content": text, "kind": "fact", "scope": "personal"}),
            )
            .await
            .unwrap()
            .to_json()["memory_id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// A SQLite store (a database of its own: nobody else's writes) whose
    /// caller remembered one fact, embedded with the bundled model until
    /// nothing is pending; `None` without the bundled model.
    async fn settled_store(
        tag: &str,
    ) -> Option<(tempfile::TempDir, Store, crate::ToolService, crate::Caller)> {
        let Some(Ok(model)) = zm_embed::bundled() else {
            return None;
        };
        let (dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, tag).await;
        let tools = crate::ToolService::new(store.clone());
        remember_fact(
            &tools,
            &caller,
            "The build cache lives in the CI bucket.".into(),
        )
        .await;
        store.set_encoder(model);
        while store.embed_pending(64).await.unwrap() > 0 {}
        Some((dir, store, tools, caller))
    }

    /// A batch whose near-duplicate sweep failed is swept again by the
    /// idle embedder's call, without waiting for another memory to embed.
    #[tokio::test]
    async fn a_failed_sweep_is_tried_again_when_idle() {
        let Some((_dir, store, tools, caller)) = settled_store("unswept").await else {
            return;
        };
        let decide = |text: &str| serde_json::json!({"content": text, "kind": "decision", "scope": "personal"});
        for text in [
            "We decided to use Postgres advisory locks for the job scheduler instead of Redis locks.",
            "Decision: the job scheduler uses Postgres advisory locks, not Redis locks.",
        ] {
            tools
                .call(&caller, zm_contracts::ToolName::Remember, &decide(text))
                .await
                .unwrap();
        }
        let unjudged = || async {
            let out = tools
                .call(
                    &caller,
                    zm_contracts::ToolName::ListConflicts,
                    &serde_json::json!({"verdict": "unjudged"}),
                )
                .await
                .unwrap()
                .to_json();
            out["conflicts"].as_array().map_or(0, Vec::len)
        };
        assert_eq!(unjudged().await, 0, "too few words in common when written");
        store
            .semantic
            .fail_next_sweep
            .store(true, Ordering::Relaxed);
        assert_eq!(store.embed_pending(64).await.unwrap(), 2, "embedded");
        assert_eq!(unjudged().await, 0, "the sweep failed");
        assert_eq!(
            store.embed_pending(64).await.unwrap(),
            0,
            "nothing new to embed"
        );
        store.sweep_by_meaning(Vec::new()).await;
        assert_eq!(unjudged().await, 1, "swept when idle");
    }

    /// A memory written while a pass is under way is embedded next, not
    /// after the older memories the pass has yet to reach.
    #[tokio::test]
    async fn a_new_write_goes_before_the_rest_of_a_pass() {
        let Some(Ok(model)) = zm_embed::bundled() else {
            return;
        };
        for (label, _dir, store) in crate::testing::stores().await {
            let caller = crate::testing::test_caller(&store, "pass").await;
            let tools = crate::ToolService::new(store.clone());
            let remember = |text: String| remember_fact(&tools, &caller, text);
            let mut old = Vec::new();
            for i in 0..3 {
                old.push(
                    remember(format!(
                        "Backlog fact number {i} about the {label} archive."
                    ))
                    .await,
                );
            }
            store.set_encoder(Arc::clone(&model));
            // The pass starts from the newest of this database's pending
            // memories (PostgreSQL's is shared: others' may come first);
            // take steps of one until it has reached one of ours.
            // Another test's store on a shared database may embed what is
            // pending first: when this one finds nothing, it loads what
            // was stored meanwhile into its index instead.
            let step = || async {
                if store.embed_pending(1).await.unwrap() == 0 {
                    store.refresh_vectors().await.unwrap();
                }
            };
            let mut steps = 0;
            while !old.iter().any(|id| store.is_embedded(id)) {
                if label == "sqlite" {
                    assert!(
                        store.embed_pending(1).await.unwrap() > 0,
                        "[{label}] pending left"
                    );
                } else {
                    step().await;
                }
                steps += 1;
                assert!(steps < 10_000, "[{label}] the pass never reached ours");
            }
            let fresh = remember(format!("A fact written during the {label} pass.")).await;
            // Newer writes of other tests on a shared database go first too.
            for _ in 0..1_000 {
                if store.is_embedded(&fresh) {
                    break;
                }
                step().await;
            }
            assert!(
                store.is_embedded(&fresh),
                "[{label}] the new write is embedded"
            );
            // On a shared PostgreSQL database another test's pass may have
            // embedded ours meanwhile: the order is checked on SQLite.
            if label == "sqlite" {
                assert!(
                    old.iter().filter(|id| store.is_embedded(id)).count() == 1,
                    "[{label}] before the rest of the pass"
                );
            }
        }
    }

    /// Once a whole pass has found nothing pending, an idle embedder looks
    /// only at what was written since (not every memory each second): a
    /// new write is embedded at once, a memory restored without a vector
    /// waits for the next whole pass, ten minutes on. SQLite (a database
    /// of its own: nobody else's writes).
    #[tokio::test]
    async fn a_settled_embedder_looks_only_at_new_writes() {
        use serde_json::json;
        use zm_contracts::ToolName;
        let Some(Ok(model)) = zm_embed::bundled() else {
            return;
        };
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "settled").await;
        let tools = crate::ToolService::new(store.clone());
        let call = |tool: &'static str, args: serde_json::Value| {
            let (tools, caller) = (&tools, &caller);
            async move {
                tools
                    .call(caller, ToolName::parse(tool).unwrap(), &args)
                    .await
                    .unwrap()
                    .to_json()
            }
        };
        let fact = |text: &str| json!({"content": text, "kind": "fact", "scope": "personal"});
        let gone = call("remember", fact("The archive moved to cold storage.")).await["memory_id"]
            .as_str()
            .unwrap()
            .to_string();
        call("forget", json!({"memory_id": gone})).await;
        call("remember", fact("The build cache lives in the CI bucket.")).await;
        store.set_encoder(Arc::clone(&model));
        while store.embed_pending(64).await.unwrap() > 0 {}
        call("restore_memory", json!({"memory_id": gone})).await;
        assert_eq!(
            store.embed_pending(64).await.unwrap(),
            0,
            "settled: no whole pass"
        );
        assert!(!store.is_embedded(&gone));
        let new = call("remember", fact("Deploys need two approvals.")).await["memory_id"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            store.embed_pending(64).await.unwrap(),
            1,
            "a new write at once"
        );
        assert!(store.is_embedded(&new));
        store.clock().advance_ms(FULL_PASS_EVERY_MS);
        assert_eq!(
            store.embed_pending(64).await.unwrap(),
            1,
            "the next whole pass"
        );
        assert!(store.is_embedded(&gone), "the restored memory is embedded");
    }

    /// A memory written while a whole pass settles (after its lookups
    /// found nothing, before it marks the newest) is above the mark: the
    /// next call embeds it, not the whole pass ten minutes on. SQLite.
    #[tokio::test]
    async fn a_write_during_the_settling_pass_is_not_hidden_by_the_mark() {
        use serde_json::json;
        use zm_contracts::ToolName;
        let Some((_dir, store, tools, caller)) = settled_store("settling").await else {
            return;
        };
        // The next whole pass (the clock moved past the settled window)
        // finds nothing; a write lands before it settles.
        store.clock().advance_ms(FULL_PASS_EVERY_MS);
        let (hook_tools, hook_caller) = (tools.clone(), caller.clone());
        let written = Arc::new(std::sync::Mutex::new(None::<String>));
        let slot = Arc::clone(&written);
        *store.semantic.before_settle.lock().unwrap() = Some(Box::pin(async move {
            let args = json!({"content": "Deploys need two approvals.", "kind": "fact", "scope": "personal"});
            let out = hook_tools
                .call(&hook_caller, ToolName::parse("remember").unwrap(), &args)
                .await
                .unwrap()
                .to_json();
            *slot.lock().unwrap() = out["memory_id"].as_str().map(str::to_string);
        }));
        assert_eq!(
            store.embed_pending(64).await.unwrap(),
            0,
            "the pass found nothing"
        );
        let new = written.lock().unwrap().clone().expect("the hook wrote");
        assert_eq!(
            store.embed_pending(64).await.unwrap(),
            1,
            "the write during the settling is embedded at once"
        );
        assert!(store.is_embedded(&new));
    }

    /// A batch that fails to store its vectors neither moves the mark past
    /// its memories nor keeps their claims: the next call embeds them (not
    /// the next whole pass, ten minutes on, nor after the claims lapse).
    #[tokio::test]
    async fn a_failed_batch_is_taken_again_by_the_next_call() {
        let Some((_dir, store, tools, caller)) = settled_store("failed-batch").await else {
            return;
        };
        assert_eq!(store.embed_pending(64).await.unwrap(), 0, "settled");
        let new = remember_fact(&tools, &caller, "Deploys need two approvals.".into()).await;
        store
            .semantic
            .fail_next_store
            .store(true, Ordering::Relaxed);
        assert!(store.embed_pending(64).await.is_err(), "the batch failed");
        assert!(!store.is_embedded(&new));
        let claims: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM embedding_claims")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(claims, 0, "the failed batch's claims are released");
        assert_eq!(
            store.embed_pending(64).await.unwrap(),
            1,
            "taken again at once"
        );
        assert!(store.is_embedded(&new));
    }

    /// A release drops only the claims this embedder still holds: one
    /// that lapsed and another embedder took (a later `until_at`) stays
    /// that embedder's, or both would embed the memory.
    #[tokio::test]
    async fn a_release_leaves_a_claim_taken_over() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "taken-over").await;
        let tools = crate::ToolService::new(store.clone());
        let ours = remember_fact(&tools, &caller, "The office closes at six.".into()).await;
        let theirs = remember_fact(&tools, &caller, "Deploys need two approvals.".into()).await;
        let until = store.now() + CLAIM_MS;
        for (id, held_until) in [(&ours, until), (&theirs, until + 5)] {
            sqlx::query(
                "INSERT INTO embedding_claims (memory_id, model, until_at) VALUES ($1, 'm', $2)",
            )
            .bind(id)
            .bind(held_until)
            .execute(&store.pool)
            .await
            .unwrap();
        }
        let batch = [
            (ours.clone(), String::new()),
            (theirs.clone(), String::new()),
        ];
        let mut conn = store.pool.acquire().await.unwrap();
        release_claims(&mut conn, "m", &batch, until).await.unwrap();
        let left: Vec<String> = sqlx::query_scalar("SELECT memory_id FROM embedding_claims")
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        assert_eq!(
            left,
            vec![theirs],
            "only the other embedder's claim is left"
        );
    }

    /// What the model refused stays counted after the process that
    /// refused it: `refused_memories` reads the database (what `reindex`
    /// reports), while this process's figure counts its own refusals,
    /// once each: a batch that failed to store counts nothing, and is
    /// counted when it is embedded again.
    #[tokio::test]
    async fn refusals_are_counted_from_the_database() {
        let (dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "refused").await;
        let tools = crate::ToolService::new(store.clone());
        for text in ["nan", "The build cache lives in the CI bucket."] {
            remember_fact(&tools, &caller, text.into()).await;
        }
        store.set_encoder(Arc::new(Odd { strict: false }));
        store
            .semantic
            .fail_next_store
            .store(true, Ordering::Relaxed);
        assert!(store.embed_pending(64).await.is_err(), "the batch failed");
        assert_eq!(store.semantic_status().refused, 0, "nothing stored");
        while store.embed_pending(64).await.unwrap() > 0 {}
        assert_eq!(store.semantic_status().refused, 1);
        assert_eq!(store.refused_memories().await.unwrap(), 1);
        assert_eq!(
            store.embedding_queue().await.unwrap(),
            0,
            "none left to try"
        );
        // Another process (a second `reindex`) refuses nothing itself.
        let again = Store::open(&crate::sqlite_url(&dir.path().join("zm.db")))
            .await
            .expect("open the file again");
        again.set_encoder(Arc::new(Odd { strict: false }));
        assert_eq!(again.embed_pending(64).await.unwrap(), 0);
        assert_eq!(again.semantic_status().refused, 0);
        assert_eq!(again.refused_memories().await.unwrap(), 1);
    }

    /// A query the model refuses is counted as refused (and recall runs
    /// on full text); one it embeds is not.
    #[tokio::test]
    async fn a_refused_query_is_counted() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        store.set_encoder(Arc::new(Odd { strict: false }));
        assert!(store.embed_query("deploys").await.is_some());
        assert!(store.embed_query("nan").await.is_none());
        assert!(store.embed_query("zero").await.is_none());
        assert!(store.embed_query("panic").await.is_none(), "a panic");
        let st = store.semantic_status();
        assert_eq!((st.queries, st.queries_refused), (4, 3));
        assert!(
            store
                .semantic_metrics()
                .await
                .contains("zm_query_embeddings_refused_total 3\n")
        );
        assert!(store.embed_query("deploys").await.is_some(), "still served");
    }

    /// A memory another embedder claimed, and never wrote (killed), is
    /// embedded here once its claim lapses, not at the next whole pass:
    /// a settled embedder's mark does not move past it meanwhile.
    #[tokio::test]
    async fn a_lapsed_claim_below_newer_writes_is_embedded() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "lapsed").await;
        let tools = crate::ToolService::new(store.clone());
        let remember = |text: &str| remember_fact(&tools, &caller, text.into());
        remember("The build cache lives in the CI bucket.").await;
        let model = Odd { strict: false };
        let name = model.model().to_string();
        store.set_encoder(Arc::new(model));
        while store.embed_pending(64).await.unwrap() > 0 {}
        assert_eq!(store.embed_pending(64).await.unwrap(), 0, "settled");
        let held = remember("The office closes at six on Fridays.").await;
        // Another embedder claims it, and dies.
        sqlx::query(
            "INSERT INTO embedding_claims (memory_id, model, until_at) VALUES ($1, $2, $3)",
        )
        .bind(&held)
        .bind(&name)
        .bind(store.now() + CLAIM_MS)
        .execute(&store.pool)
        .await
        .unwrap();
        let newer = remember("Deploys need two approvals.").await;
        assert_eq!(store.embed_pending(64).await.unwrap(), 1, "the newer one");
        assert!(store.is_embedded(&newer) && !store.is_embedded(&held));
        store.clock().advance_ms(CLAIM_MS);
        assert_eq!(
            store.embed_pending(64).await.unwrap(),
            1,
            "the lapsed claim's memory"
        );
        assert!(store.is_embedded(&held));
    }

    /// A model that holds each text until a second one is inside with it
    /// (or 300 ms pass), counting the most it held at once.
    #[derive(Default)]
    struct Held {
        inside: std::sync::Mutex<usize>,
        wake: std::sync::Condvar,
        most: std::sync::atomic::AtomicUsize,
    }

    impl Encoder for Held {
        fn model(&self) -> &str {
            "test-held"
        }
        fn dims(&self) -> usize {
            4
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, zm_embed::EmbedError> {
            let mut n = self.inside.lock().unwrap();
            *n += 1;
            self.most.fetch_max(*n, Ordering::SeqCst);
            self.wake.notify_all();
            let (mut n, _) = self
                .wake
                .wait_timeout_while(n, std::time::Duration::from_millis(300), |n| *n < 2)
                .unwrap();
            *n -= 1;
            Ok(vec![vec![0.5; 4]; texts.len()])
        }
    }

    /// Queries are embedded a core's worth at a time: with one slot, three
    /// recalls at once are embedded one after another, and each gets its
    /// vector.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queries_wait_for_a_slot() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let model = Arc::new(Held::default());
        store.set_encoder(Arc::clone(&model) as Arc<dyn Encoder>);
        let slots = &store.semantic.query_slots.0;
        slots.forget_permits(slots.available_permits() - 1);
        let (a, b, c) = tokio::join!(
            store.embed_query("where do the backups go"),
            store.embed_query("who approves a deploy"),
            store.embed_query("which port does the cache use"),
        );
        assert!(a.is_some() && b.is_some() && c.is_some());
        assert_eq!(model.most.load(Ordering::SeqCst), 1, "one at a time");
        assert_eq!(slots.available_permits(), 1, "the slot is given back");
    }

    /// SQLite hands the `seq` of a deleted newest memory to the next one:
    /// a settled embedder still embeds that one at once (it waited for the
    /// next whole pass, ten minutes on).
    #[tokio::test]
    async fn a_memory_under_a_reused_seq_is_embedded_at_once() {
        let Some(Ok(model)) = zm_embed::bundled() else {
            return;
        };
        let (_dir, store) = crate::testing::sqlite_store().await;
        let caller = crate::testing::test_caller(&store, "reused").await;
        let tools = crate::ToolService::new(store.clone());
        let remember = |text: &'static str| remember_fact(&tools, &caller, text.to_string());
        remember("The archive moved to cold storage.").await;
        let newest = remember("The build cache lives in the CI bucket.").await;
        store.set_encoder(Arc::clone(&model));
        while store.embed_pending(64).await.unwrap() > 0 {}
        assert_eq!(store.embed_pending(64).await.unwrap(), 0, "settled");
        let seq = |id: String| {
            let store = store.clone();
            async move {
                sqlx::query_scalar::<_, i64>("SELECT seq FROM memories WHERE id = $1")
                    .bind(id)
                    .fetch_one(&store.pool)
                    .await
                    .unwrap()
            }
        };
        let reused = seq(newest.clone()).await;
        sqlx::query("DELETE FROM memories WHERE id = $1")
            .bind(&newest)
            .execute(&store.pool)
            .await
            .unwrap();
        let next = remember("Deploys need two approvals.").await;
        assert_eq!(seq(next.clone()).await, reused, "SQLite reused the number");
        assert_eq!(
            store.embed_pending(64).await.unwrap(),
            1,
            "embedded at once"
        );
        assert!(store.is_embedded(&next));
    }

    #[test]
    fn sign_bits_count_the_differing_signs() {
        let a: Vec<i8> = (0..130).map(|i| if i % 3 == 0 { 5 } else { -5 }).collect();
        let mut b = a.clone();
        b[0] = -1; // positive → negative
        b[64] = 0; // negative → zero: not positive either, no change
        b[65] = 9; // negative → positive, in the second word
        b[129] = 7; // positive → positive, in the third word
        let (sa, sb) = (sign_bits(&a), sign_bits(&b));
        assert_eq!(sa.len(), 3);
        assert_eq!(hamming(&sa, &sa), 0);
        assert_eq!(hamming(&sa, &sb), 2);
    }
}
