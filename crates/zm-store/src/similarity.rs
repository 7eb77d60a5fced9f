//! Lexical similarity: cosine over TF-IDF vectors.
//!
//! Used for near-duplicate detection when a memory is written. Purely
//! lexical (no stemming, no embeddings): deterministic and cheap.

use std::collections::{BTreeMap, HashMap, HashSet};

/// Candidates scoring at least this are reported as similar.
pub const SIMILAR_FLOOR: f64 = 0.80;
/// Above this, a write is treated as a near-duplicate even without judgement.
pub const UNJUDGED_FLOOR: f64 = 0.92;
/// At most this many similar memories are reported.
pub const SIMILAR_CAP: usize = 10;

/// Lowercased runs of Unicode alphanumeric characters, of the text in
/// composed form (NFC: `nai\u{308}ve`, as a decomposing keyboard or OS
/// writes it, is the word `naïve`, not `nai` and `ve`). Every character of
/// every token is alphanumeric (lowercasing never introduces anything else:
/// non-alphanumeric parts of a lowercase mapping, such as a combining dot,
/// are dropped).
pub fn tokenize(text: &str) -> Vec<String> {
    use unicode_normalization::UnicodeNormalization;
    let mut tokens = Vec::new();
    let mut current = String::new();
    for c in text.nfc() {
        if c.is_alphanumeric() {
            current.extend(c.to_lowercase().filter(|l| l.is_alphanumeric()));
        } else if !current.is_empty() {
            tokens.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

/// Document frequencies over a set of documents.
#[derive(Debug, Clone, Default)]
pub struct Corpus {
    docs: usize,
    df: HashMap<String, usize>,
}

/// A sparse vector sorted by term (each term once).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseVec(pub Vec<(String, f64)>);

impl SparseVec {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Euclidean length.
    pub fn norm(&self) -> f64 {
        self.0.iter().map(|(_, w)| w * w).sum::<f64>().sqrt()
    }
}

impl Corpus {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add one document (its tokens; repeats count once for df).
    pub fn add(&mut self, tokens: &[String]) {
        self.docs += 1;
        let unique: HashSet<&String> = tokens.iter().collect();
        for term in unique {
            *self.df.entry(term.clone()).or_insert(0) += 1;
        }
    }

    /// How many documents were added.
    pub fn doc_count(&self) -> usize {
        self.docs
    }

    /// How many documents contain `term`.
    pub fn doc_freq(&self, term: &str) -> usize {
        self.df.get(term).copied().unwrap_or(0)
    }

    /// Smoothed inverse document frequency: `ln((1+N)/(1+df)) + 1`.
    /// Always ≥ 1 for terms in the corpus; unknown terms get the highest
    /// weight.
    pub fn idf(&self, term: &str) -> f64 {
        let n = self.docs as f64;
        let df = self.doc_freq(term) as f64;
        ((1.0 + n) / (1.0 + df)).ln() + 1.0
    }

    /// Sublinear TF (`1 + ln(count)`) times IDF, L2-normalised, sorted by term.
    pub fn vector(&self, tokens: &[String]) -> SparseVec {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for t in tokens {
            *counts.entry(t.as_str()).or_insert(0) += 1;
        }
        let mut entries: Vec<(String, f64)> = counts
            .into_iter()
            .map(|(term, count)| {
                let tf = 1.0 + (count as f64).ln();
                (term.to_owned(), tf * self.idf(term))
            })
            .collect();
        let norm = entries.iter().map(|(_, w)| w * w).sum::<f64>().sqrt();
        if norm > 0.0 {
            for (_, w) in &mut entries {
                *w /= norm;
            }
        }
        SparseVec(entries)
    }
}

/// Cosine similarity of two term-sorted vectors, clamped to `[0, 1]`; 0 when
/// either is empty (or zero).
pub fn cosine(a: &SparseVec, b: &SparseVec) -> f64 {
    let (na, nb) = (a.norm(), b.norm());
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    let (mut i, mut j, mut dot) = (0, 0, 0.0);
    let (xa, xb) = (&a.0, &b.0);
    while i < xa.len() && j < xb.len() {
        match xa[i].0.cmp(&xb[j].0) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                dot += xa[i].1 * xb[j].1;
                i += 1;
                j += 1;
            }
        }
    }
    let c = dot / (na * nb);
    if c.is_nan() { 0.0 } else { c.clamp(0.0, 1.0) }
}

/// Score `query` against each `(index, text)` candidate with a corpus built
/// from the candidates and the query. Keeps scores `>= floor`, sorted by
/// score descending then index ascending, at most `cap` of them.
pub fn rank_similar(
    query: &str,
    candidates: &[(usize, &str)],
    floor: f64,
    cap: usize,
) -> Vec<(usize, f64)> {
    rank_similar_tokens(&tokenize(query), candidates, floor, cap)
}

/// [`rank_similar`] for a query already tokenised ([`tokenize`]), so a
/// caller can tokenise its own text before it holds a lock and leave only
/// the candidates' work for later.
pub fn rank_similar_tokens(
    query_tokens: &[String],
    candidates: &[(usize, &str)],
    floor: f64,
    cap: usize,
) -> Vec<(usize, f64)> {
    if cap == 0 {
        return Vec::new();
    }
    if query_tokens.is_empty() {
        return Vec::new();
    }
    let candidate_tokens: Vec<Vec<String>> =
        candidates.iter().map(|(_, text)| tokenize(text)).collect();
    let mut corpus = Corpus::new();
    corpus.add(query_tokens);
    for tokens in &candidate_tokens {
        corpus.add(tokens);
    }
    let q = corpus.vector(query_tokens);
    let mut scored: Vec<(usize, f64)> = candidates
        .iter()
        .zip(&candidate_tokens)
        .map(|((index, _), tokens)| (*index, cosine(&q, &corpus.vector(tokens))))
        .filter(|(_, score)| *score >= floor)
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(cap);
    scored
}

/// The first `max_chars` characters of `text` (never splits a character).
pub fn preview(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((byte, _)) => text[..byte].to_owned(),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGINAL: &str = "The staging database runs PostgreSQL sixteen with the pgvector extension enabled by default";
    const EDITED: &str = "The staging database runs PostgreSQL seventeen with the pgvector extension enabled by default";
    const UNRELATED: [&str; 4] = [
        "Alice prefers tabs over spaces in every Go file she reviews",
        "Deploys to production happen on Tuesdays after the weekly sync",
        "The frontend build uses Vite and outputs to the dist folder",
        "Never run migrations by hand; the release pipeline applies them",
    ];

    fn toks(s: &str) -> Vec<String> {
        tokenize(s)
    }

    /// Decomposed text (a letter, then its combining accent) gives the
    /// words its composed spelling gives.
    #[test]
    fn decomposed_text_tokenizes_as_composed() {
        assert_eq!(tokenize("nai\u{308}ve cafe\u{301}"), tokenize("naïve café"));
        assert_eq!(tokenize("nai\u{308}ve"), ["naïve"]);
    }

    #[test]
    fn tokenize_rules() {
        assert_eq!(
            toks("Hello, World! foo_bar x-1 2024"),
            vec!["hello", "world", "foo", "bar", "x", "1", "2024"]
        );
        assert_eq!(toks("café naïve 日本語"), vec!["café", "naïve", "日本語"]);
        assert_eq!(toks("ÀÉÎ"), vec!["àéî"]);
        assert!(toks("").is_empty());
        assert!(toks("  ,.;!? 🎉🎉 ").is_empty());
        assert_eq!(toks("a"), vec!["a"]);
        // `İ` lowercases to `i` + combining dot; the dot is dropped.
        assert_eq!(toks("İstanbul"), vec!["istanbul"]);
        for t in toks("Ünïcödé İİ ß ΣΑΣ x\u{0301}y") {
            assert!(t.chars().all(char::is_alphanumeric), "{t:?}");
        }
    }

    #[test]
    fn idf_and_doc_count() {
        let mut c = Corpus::new();
        assert_eq!(c.doc_count(), 0);
        assert!((c.idf("x") - 1.0).abs() < 1e-12);
        c.add(&toks("a a b"));
        c.add(&toks("a c"));
        assert_eq!(c.doc_count(), 2);
        assert_eq!(c.doc_freq("a"), 2);
        assert_eq!(c.doc_freq("b"), 1);
        assert!((c.idf("a") - 1.0).abs() < 1e-12);
        assert!((c.idf("b") - ((3.0f64 / 2.0).ln() + 1.0)).abs() < 1e-12);
        assert!((c.idf("zzz") - (3.0f64.ln() + 1.0)).abs() < 1e-12);
    }

    #[test]
    fn vectors_are_sorted_and_normalised() {
        let mut c = Corpus::new();
        c.add(&toks("zeta alpha alpha mid"));
        let v = c.vector(&toks("zeta alpha alpha mid"));
        let terms: Vec<&str> = v.0.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(terms, vec!["alpha", "mid", "zeta"]);
        assert!((v.norm() - 1.0).abs() < 1e-12);
        // sublinear tf: alpha (2×) weighs 1 + ln 2 times a single term
        let ratio = v.0[0].1 / v.0[1].1;
        assert!((ratio - (1.0 + 2f64.ln())).abs() < 1e-12);
        assert!(c.vector(&[]).is_empty());
    }

    #[test]
    fn identical_is_one_disjoint_is_zero() {
        let mut c = Corpus::new();
        for d in [ORIGINAL, UNRELATED[0], UNRELATED[1]] {
            c.add(&toks(d));
        }
        let a = c.vector(&toks(ORIGINAL));
        assert!((cosine(&a, &a) - 1.0).abs() < 1e-9);
        let b = c.vector(&toks(ORIGINAL));
        assert!((cosine(&a, &b) - 1.0).abs() < 1e-9);
        let d = c.vector(&toks("completely different words here"));
        assert_eq!(cosine(&a, &d), 0.0);
        let empty = SparseVec::default();
        assert_eq!(cosine(&a, &empty), 0.0);
        assert_eq!(cosine(&empty, &empty), 0.0);
    }

    #[test]
    fn cosine_handles_unnormalised_input() {
        let a = SparseVec(vec![("x".into(), 3.0), ("y".into(), 4.0)]);
        let b = SparseVec(vec![("x".into(), 6.0), ("y".into(), 8.0)]);
        assert!((cosine(&a, &b) - 1.0).abs() < 1e-12);
        let z = SparseVec(vec![("x".into(), 0.0)]);
        assert_eq!(cosine(&a, &z), 0.0);
    }

    #[test]
    fn one_word_edit_stays_similar() {
        assert_eq!(toks(ORIGINAL).len(), 13);
        let twelve = "We store every memory in one table with a scope path column";
        let twelve_edit = "We store every memory in one table with a scope label column";
        assert_eq!(toks(twelve).len(), 12);
        for (orig, edit) in [(ORIGINAL, EDITED), (twelve, twelve_edit)] {
            let mut c = Corpus::new();
            for d in UNRELATED.iter().chain([&orig, &edit]) {
                c.add(&toks(d));
            }
            let s = cosine(&c.vector(&toks(orig)), &c.vector(&toks(edit)));
            assert!(s >= SIMILAR_FLOOR, "edit scored {s}");
            assert!(s < 1.0);
            for u in UNRELATED {
                let s = cosine(&c.vector(&toks(orig)), &c.vector(&toks(u)));
                assert!(s < 0.5, "unrelated scored {s}");
            }
        }
    }

    #[test]
    fn rank_similar_respects_floor_cap_and_order() {
        let mut candidates: Vec<(usize, &str)> = UNRELATED.iter().copied().enumerate().collect();
        candidates.push((10, EDITED));
        candidates.push((11, ORIGINAL));
        candidates.push((12, ORIGINAL));
        let ranked = rank_similar(ORIGINAL, &candidates, SIMILAR_FLOOR, SIMILAR_CAP);
        let ids: Vec<usize> = ranked.iter().map(|(i, _)| *i).collect();
        assert_eq!(ids, vec![11, 12, 10]);
        assert!((ranked[0].1 - 1.0).abs() < 1e-9);
        assert!((ranked[1].1 - 1.0).abs() < 1e-9);
        assert!(ranked[2].1 >= SIMILAR_FLOOR && ranked[2].1 < 1.0);

        // cap
        let capped = rank_similar(ORIGINAL, &candidates, SIMILAR_FLOOR, 2);
        assert_eq!(
            capped.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            vec![11, 12]
        );
        assert!(rank_similar(ORIGINAL, &candidates, SIMILAR_FLOOR, 0).is_empty());

        // floor
        let strict = rank_similar(ORIGINAL, &candidates, UNJUDGED_FLOOR, SIMILAR_CAP);
        assert!(strict.iter().all(|(_, s)| *s >= UNJUDGED_FLOOR));
        let everything = rank_similar(ORIGINAL, &candidates, 0.0, 100);
        assert_eq!(everything.len(), candidates.len());
        for w in everything.windows(2) {
            assert!(w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0));
        }

        // degenerate inputs
        assert!(rank_similar("", &candidates, 0.0, 10).is_empty());
        assert!(rank_similar("!!!", &candidates, 0.0, 10).is_empty());
        assert!(rank_similar(ORIGINAL, &[], 0.0, 10).is_empty());
        assert_eq!(rank_similar(ORIGINAL, &[(3, "")], 0.0, 10), vec![(3, 0.0)]);
    }

    #[test]
    fn rank_similar_tokens_matches_rank_similar() {
        let mut candidates: Vec<(usize, &str)> = vec![(0, EDITED), (7, ORIGINAL)];
        candidates.extend(UNRELATED.iter().enumerate().map(|(i, t)| (i + 1, *t)));
        for query in [ORIGINAL, EDITED, UNRELATED[2], "", "!!!"] {
            let tokens = tokenize(query);
            for (floor, cap) in [(SIMILAR_FLOOR, SIMILAR_CAP), (0.0, 100), (0.0, 0)] {
                assert_eq!(
                    rank_similar_tokens(&tokens, &candidates, floor, cap),
                    rank_similar(query, &candidates, floor, cap),
                    "{query:?} {floor} {cap}"
                );
            }
        }
    }

    #[test]
    fn preview_is_char_safe() {
        assert_eq!(preview("hello world", 5), "hello");
        assert_eq!(preview("hi", 5), "hi");
        assert_eq!(preview("", 3), "");
        assert_eq!(preview("abc", 0), "");
        assert_eq!(preview("🎉🎉🎉🎉", 2), "🎉🎉");
        assert_eq!(preview("a🎉b", 2), "a🎉");
        assert_eq!(preview("日本語テキスト", 3), "日本語");
        assert_eq!(preview("🎉", 1), "🎉");
    }

    #[test]
    fn constants() {
        assert_eq!(SIMILAR_FLOOR, 0.80);
        assert_eq!(UNJUDGED_FLOOR, 0.92);
        assert_eq!(SIMILAR_CAP, 10);
        const { assert!(UNJUDGED_FLOOR > SIMILAR_FLOOR) };
    }
}
