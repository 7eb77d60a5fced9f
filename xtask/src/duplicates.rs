//! The near-duplicate part of `cargo xtask quality`: how well `remember`'s
//! word-overlap check (`similar_existing`, and an `unjudged` conflict for a
//! close pair) and the sweep by meaning after embedding tell restatements
//! from different facts about the same subject.
//!
//! Data: `bench/quality/duplicates.jsonl` (held out) and
//! `duplicates-dev.jsonl` (development: `MEANING_DUPLICATE_FLOOR` is chosen
//! on it). Each line is a pair `a`, `b` with a label: `same` (a
//! restatement: a person would merge them), `contradicts` (the same
//! subject, incompatible claims: worth a judge too) or `related` (the same
//! subject, a different compatible fact: should not be flagged).
//!
//! The pairs are remembered [`PAIRS_PER_USER`] to a user, into that
//! user's personal scope, through the tool service, exactly as an agent
//! writes (so each pair meets the others' memories); the bundled (or
//! `--model`) model then embeds both, and `list_conflicts` tells whether
//! the pair became an `unjudged` conflict by words (at `remember`) or by
//! meaning (after embedding). A second table gives, for a range of floors,
//! the share of each label whose cosine (int8, as the store compares) is
//! at or above it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use serde_json::json;
use zm_contracts::ToolName;
use zm_embed::{Encoder, Vector};
use zm_store::{Caller, Store, ToolService};

use crate::bench_support::temp_dir;

const LABELS: [&str; 3] = ["same", "contradicts", "related"];
const FLOORS: [f32; 10] = [0.50, 0.60, 0.70, 0.75, 0.80, 0.85, 0.88, 0.90, 0.92, 0.95];

struct Pair {
    id: String,
    label: String,
    a: String,
    b: String,
}

fn pairs(path: &Path) -> Result<Vec<Pair>, String> {
    use crate::quality::{read_jsonl, str_field};
    read_jsonl(path)?
        .iter()
        .map(|v| {
            let label = str_field(v, "label", path)?;
            if !LABELS.contains(&label.as_str()) {
                return Err(format!("{}: unknown label {label:?}", path.display()));
            }
            Ok(Pair {
                id: str_field(v, "id", path)?,
                label,
                a: str_field(v, "a", path)?,
                b: str_field(v, "b", path)?,
            })
        })
        .collect()
}

/// What became of one pair.
#[derive(Default, Clone, Copy)]
struct Outcome {
    /// `remember` of `b` listed `a` in `similar_existing`.
    similar_existing: bool,
    /// An `unjudged` conflict filed at `remember` (word overlap).
    by_words: bool,
    /// An `unjudged` conflict filed after embedding (meaning).
    by_meaning: bool,
    cosine: f32,
}

/// Pairs per user: each user's personal scope holds this many pairs (twice
/// as many memories), so word overlap is weighed against a realistic
/// vocabulary and every pair also meets the other pairs' memories.
const PAIRS_PER_USER: usize = 30;

/// Run one duplicates file end to end and print its two tables.
pub(crate) async fn report(
    name: &str,
    path: &Path,
    encoder: std::sync::Arc<dyn Encoder>,
) -> Result<(), String> {
    let pairs = pairs(path)?;
    let dir = temp_dir("duplicates")?;
    let url = zm_store::sqlite_url(&dir.join("duplicates.db"));
    let store = Store::open(&url)
        .await
        .map_err(|e| format!("open {url}: {e}"))?;
    store.set_encoder(std::sync::Arc::clone(&encoder));
    let tools = ToolService::new(store.clone());
    let mut outcomes: Vec<(String, Outcome)> = Vec::with_capacity(pairs.len());
    // Memory id → its pair; per user, the pairs filed at remember.
    let mut pair_of: HashMap<String, usize> = HashMap::new();
    let mut users: Vec<(Caller, HashSet<[usize; 2]>)> = Vec::new();
    for (u, chunk) in pairs.chunks(PAIRS_PER_USER).enumerate() {
        let user = store
            .create_user(
                &format!("dup-{name}-{u}@bench.zero-memory.invalid"),
                "duplicates password",
            )
            .await
            .map_err(|e| format!("create a user: {e}"))?;
        let caller = Caller::new(user.id.clone());
        for p in chunk {
            let n = outcomes.len();
            let mut o = Outcome::default();
            let mut first = String::new();
            for (side, text) in [&p.a, &p.b].into_iter().enumerate() {
                let out = tools
                    .call(
                        &caller,
                        ToolName::Remember,
                        &json!({"content": text, "kind": "fact", "scope": "personal"}),
                    )
                    .await
                    .map_err(|e| format!("{}: remember: {}", p.id, e.message))?
                    .to_json();
                let id = out["memory_id"].as_str().unwrap_or_default().to_string();
                if side == 0 {
                    first.clone_from(&id);
                } else {
                    if id == first {
                        return Err(format!("{}: the two texts are identical", p.id));
                    }
                    if std::env::var_os("ZM_QUALITY_TRACE").is_some() {
                        eprintln!("{} similar_existing {}", p.id, out["similar_existing"]);
                    }
                    o.similar_existing = out["similar_existing"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|s| s["id"] == first.as_str());
                }
                pair_of.insert(id, n);
            }
            let va = embed_one(encoder.as_ref(), &p.a)?;
            let vb = embed_one(encoder.as_ref(), &p.b)?;
            o.cosine = va.cosine(&vb);
            if std::env::var_os("ZM_QUALITY_TRACE").is_some() {
                eprintln!(
                    "{} {} {:.3}\n  a: {}\n  b: {}",
                    p.id, p.label, o.cosine, p.a, p.b
                );
            }
            outcomes.push((p.label.clone(), o));
        }
        let at_remember = conflicts(&tools, &caller)
            .await?
            .iter()
            .filter_map(|c| pair_indices(c, &pair_of))
            .collect();
        users.push((caller, at_remember));
    }
    crate::quality::embed_all(&store).await?;
    let mut across = 0;
    for (caller, at_remember) in &users {
        for c in conflicts(&tools, caller).await? {
            let Some([x, y]) = pair_indices(&c, &pair_of) else {
                continue;
            };
            if x != y {
                across += 1;
                continue;
            }
            let o = &mut outcomes[x].1;
            if at_remember.contains(&[x, y]) {
                o.by_words = true;
            } else if c["rationale"]
                .as_str()
                .is_some_and(|r| r.starts_with("Close in meaning"))
            {
                o.by_meaning = true;
            }
        }
    }
    print(name, &outcomes, across, users.len());
    Ok(())
}

/// The pairs (indices into the file) of a conflict's two memories.
fn pair_indices(c: &serde_json::Value, pair_of: &HashMap<String, usize>) -> Option<[usize; 2]> {
    let side = |k: &str| c[k]["id"].as_str().and_then(|id| pair_of.get(id)).copied();
    let (x, y) = (side("memory_a")?, side("memory_b")?);
    Some([x.min(y), x.max(y)])
}

async fn conflicts(tools: &ToolService, caller: &Caller) -> Result<Vec<serde_json::Value>, String> {
    let out = tools
        .call(
            caller,
            ToolName::ListConflicts,
            &json!({"verdict": "unjudged", "limit": 100}),
        )
        .await
        .map_err(|e| format!("list_conflicts: {}", e.message))?
        .to_json();
    Ok(out["conflicts"].as_array().cloned().unwrap_or_default())
}

fn embed_one(encoder: &dyn Encoder, text: &str) -> Result<Vector, String> {
    let mut v = encoder.embed(&[text]).map_err(|e| e.to_string())?;
    if v.len() != 1 {
        return Err("the model returned no vector".into());
    }
    Ok(Vector::quantize(&v.swap_remove(0)))
}

#[allow(clippy::cast_precision_loss)]
fn share(n: usize, of: usize) -> String {
    if of == 0 {
        "–".into()
    } else {
        format!("{:.2}", n as f64 / of as f64)
    }
}

/// A yes/no question about one pair's outcome.
type Check<'a> = &'a dyn Fn(&Outcome) -> bool;

fn print(name: &str, outcomes: &[(String, Outcome)], across: usize, users: usize) {
    let mut by: BTreeMap<&str, Vec<Outcome>> = BTreeMap::new();
    for (label, o) in outcomes {
        by.entry(label.as_str()).or_default().push(*o);
    }
    let count = |label: &str, f: &dyn Fn(&Outcome) -> bool| {
        let v = by.get(label).map(Vec::as_slice).unwrap_or_default();
        share(v.iter().filter(|o| f(o)).count(), v.len())
    };
    println!("\n### {name}: near-duplicates ({} pairs)\n", outcomes.len());
    println!("Share of pairs flagged (higher is better for `same`, lower for `related`).\n");
    println!("| check | same | contradicts | related |");
    println!("|---|---:|---:|---:|");
    let rows: [(&str, Check); 4] = [
        ("`similar_existing` at remember (words)", &|o| {
            o.similar_existing
        }),
        ("`unjudged` conflict at remember (words)", &|o| o.by_words),
        ("`unjudged` conflict after embedding (meaning)", &|o| {
            o.by_meaning
        }),
        ("`unjudged` conflict, either", &|o| {
            o.by_words || o.by_meaning
        }),
    ];
    for (what, f) in rows {
        println!(
            "| {what} | {} | {} | {} |",
            count("same", f),
            count("contradicts", f),
            count("related", f)
        );
    }
    println!(
        "\nConflicts filed between memories of two different pairs (different subjects, {PAIRS_PER_USER} pairs per personal scope, {users} scopes): {across}."
    );
    println!("\nShare of pairs at or above a cosine floor:\n");
    println!("| floor | same | contradicts | related |");
    println!("|---:|---:|---:|---:|");
    for floor in FLOORS {
        let f = |o: &Outcome| o.cosine >= floor;
        println!(
            "| {floor:.2} | {} | {} | {} |",
            count("same", &f),
            count("contradicts", &f),
            count("related", &f)
        );
    }
}
