//! Safe full-text queries from any user text.
//!
//! User text is never handed to a full-text query parser as-is. It is cut
//! into tokens with [`tokenize`] (so every token consists of alphanumeric
//! characters only: no quotes, operators, parentheses, colons, stars or
//! carets survive), de-duplicated, capped, and re-assembled into a query
//! that can only mean "any of these words".

use std::collections::HashSet;

use crate::similarity::tokenize;

/// At most this many distinct terms reach a full-text query.
pub const MAX_QUERY_TERMS: usize = 32;

/// The distinct tokens of `user_text`, first occurrence order, at most
/// [`MAX_QUERY_TERMS`]. Every character of every term is alphanumeric.
pub fn query_terms(user_text: &str) -> Vec<String> {
    distinct_tokens(user_text)
        .into_iter()
        .take(MAX_QUERY_TERMS)
        .collect()
}

/// The distinct tokens of `user_text`, first occurrence order.
fn distinct_tokens(user_text: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    tokenize(user_text)
        .into_iter()
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

/// English stop words: PostgreSQL's `english` text-search configuration
/// (the Snowball list) drops these from both the content and the query.
/// SQLite's FTS5 indexes them, so a query leaves them out itself — else
/// "how are the invoices stored" matches every memory holding "the".
pub const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "did",
    "do",
    "does",
    "doing",
    "don",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "s",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "t",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// The terms a recall searches for: [`query_terms`] without
/// [`STOP_WORDS`] — unless the query holds nothing else ("who are you"),
/// then all of them.
///
/// Stop words are left out before the cap of [`MAX_QUERY_TERMS`]: a long
/// question's content words are not pushed out by the words around them.
pub fn search_terms(user_text: &str) -> Vec<String> {
    let distinct = distinct_tokens(user_text);
    let content: Vec<String> = distinct
        .iter()
        .filter(|t| !is_stop_word(t))
        .take(MAX_QUERY_TERMS)
        .cloned()
        .collect();
    if content.is_empty() {
        distinct.into_iter().take(MAX_QUERY_TERMS).collect()
    } else {
        content
    }
}

/// Is `term` (lowercase) one of the [`STOP_WORDS`]?
pub fn is_stop_word(term: &str) -> bool {
    STOP_WORDS.binary_search(&term).is_ok()
}

/// Which memories a full-text query matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// Those holding every query word.
    All,
    /// Those holding any query word.
    Any,
}

/// An SQLite FTS5 `MATCH` expression: every term quoted as a string literal
/// and OR-ed, e.g. `"postgres" OR "index"`. `None` when there are no terms.
///
/// FTS5 keywords (`AND`, `OR`, `NOT`, `NEAR`) in the input are harmless:
/// they are lowercased and quoted like any other word.
pub fn sqlite_match_query(user_text: &str) -> Option<String> {
    sqlite_match(user_text, Match::Any)
}

/// [`sqlite_match_query`] with the terms AND-ed ([`Match::All`]) or OR-ed.
pub fn sqlite_match(user_text: &str, mode: Match) -> Option<String> {
    let terms = query_terms(user_text);
    if terms.is_empty() {
        return None;
    }
    let quoted: Vec<String> = terms.iter().map(|t| format!("\"{t}\"")).collect();
    Some(quoted.join(match mode {
        Match::All => " AND ",
        Match::Any => " OR ",
    }))
}

/// The `n` most distinctive terms of a text, as text for [`sqlite_match_query`]
/// / [`pg_query_terms`]: the longest distinct terms (long words are the rare
/// ones), ties in order of appearance. A near-duplicate shares most of its
/// terms, so probing with these finds it without ranking every memory that
/// merely shares a common word.
pub fn distinctive_terms(text: &str, n: usize) -> String {
    let mut terms: Vec<(usize, String)> = query_terms(text).into_iter().enumerate().collect();
    terms.sort_by(|a, b| {
        b.1.chars()
            .count()
            .cmp(&a.1.chars().count())
            .then(a.0.cmp(&b.0))
    });
    terms.truncate(n);
    terms.sort_by_key(|(i, _)| *i);
    terms
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A PostgreSQL `to_tsquery('english', $1)` argument (the configuration of
/// the `memories.fts` column, so query words are stemmed and stop words
/// dropped like the content's): the terms joined with ` | `. Safe because
/// no term contains an operator character (`&`, `|`, `!`, `<`, `>`, `(`,
/// `)`, `:`, `*`, `'`, `\`). `None` when there are no terms.
pub fn pg_query_terms(user_text: &str) -> Option<String> {
    pg_query(user_text, Match::Any)
}

/// [`pg_query_terms`] with the terms joined by ` & ` ([`Match::All`]) or
/// ` | `.
pub fn pg_query(user_text: &str, mode: Match) -> Option<String> {
    let terms = query_terms(user_text);
    if terms.is_empty() {
        return None;
    }
    Some(terms.join(match mode {
        Match::All => " & ",
        Match::Any => " | ",
    }))
}

#[cfg(test)]
mod distinctive_tests {
    use super::*;

    #[test]
    fn every_word_or_any_word() {
        assert_eq!(
            sqlite_match("Postgres index?", Match::All).as_deref(),
            Some("\"postgres\" AND \"index\"")
        );
        assert_eq!(
            pg_query("Postgres index?", Match::All).as_deref(),
            Some("postgres & index")
        );
        assert_eq!(sqlite_match("AND", Match::All).as_deref(), Some("\"and\""));
        assert_eq!(pg_query("", Match::All), None);
    }

    #[test]
    fn keeps_the_longest_terms_in_order() {
        let t = distinctive_terms(
            "The staging database runs PostgreSQL on port 5433 for the billing service",
            4,
        );
        assert_eq!(t, "staging database postgresql billing");
        assert_eq!(distinctive_terms("", 4), "");
        assert_eq!(distinctive_terms("a b", 6), "a b");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hostile_inputs() -> Vec<String> {
        let mut v: Vec<String> = [
            "\"",
            "'",
            "\"\"\"",
            "''",
            "AND OR NOT NEAR",
            "foo*",
            "^bar",
            "-baz",
            "+qux",
            "(a OR b)",
            "col:val",
            "{col1 col2}:val",
            "NEAR(a b, 3)",
            "a NOT b",
            "x AND (y OR z*)",
            "🎉🎉",
            "café naïve 日本語",
            "",
            "   \t\n  ",
            "foo' | bar & !baz <-> qux:* ",
            "'; DROP TABLE memories; --",
            "\\\" \\' \\\\",
            "a\u{0}b",
            "İstanbul ΣΑΣ ß",
        ]
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
        v.push("x".repeat(10_000));
        v.push("word ".repeat(2_000));
        v.push(
            (0..5_000)
                .map(|i| format!("t{i}"))
                .collect::<Vec<_>>()
                .join(" "),
        );
        v.push("🎉a\"b'c*".repeat(1_500));
        v
    }

    /// Parse `"t1" OR "t2" OR …` strictly: every term a quoted literal of
    /// alphanumerics, separated by exactly ` OR `.
    fn assert_fts5_safe(q: &str) -> Vec<String> {
        let terms: Vec<String> = q
            .split(" OR ")
            .map(|part| {
                assert!(
                    part.len() >= 3 && part.starts_with('"') && part.ends_with('"'),
                    "unquoted term {part:?} in {q:?}"
                );
                let inner = &part[1..part.len() - 1];
                assert!(!inner.is_empty());
                assert!(inner.chars().all(char::is_alphanumeric), "{inner:?}");
                inner.to_owned()
            })
            .collect();
        assert!(terms.len() <= MAX_QUERY_TERMS);
        terms
    }

    fn assert_pg_safe(q: &str) -> Vec<String> {
        let terms: Vec<String> = q.split(" | ").map(str::to_owned).collect();
        for t in &terms {
            assert!(!t.is_empty());
            assert!(t.chars().all(char::is_alphanumeric), "{t:?} in {q:?}");
        }
        assert!(terms.len() <= MAX_QUERY_TERMS);
        terms
    }

    #[test]
    fn hostile_inputs_are_safe() {
        for input in hostile_inputs() {
            let s = sqlite_match_query(&input);
            let p = pg_query_terms(&input);
            assert_eq!(s.is_some(), p.is_some(), "{input:?}");
            if let (Some(s), Some(p)) = (s, p) {
                assert_eq!(assert_fts5_safe(&s), assert_pg_safe(&p), "{input:?}");
            }
        }
    }

    #[test]
    fn examples() {
        assert_eq!(
            sqlite_match_query("Postgres index?").as_deref(),
            Some("\"postgres\" OR \"index\"")
        );
        assert_eq!(
            pg_query_terms("Postgres index?").as_deref(),
            Some("postgres | index")
        );
        assert_eq!(
            sqlite_match_query("AND OR NOT NEAR").as_deref(),
            Some("\"and\" OR \"or\" OR \"not\" OR \"near\"")
        );
        assert_eq!(
            sqlite_match_query("NEAR(a b, 3)").as_deref(),
            Some("\"near\" OR \"a\" OR \"b\" OR \"3\"")
        );
        assert_eq!(sqlite_match_query("foo*").as_deref(), Some("\"foo\""));
        assert_eq!(sqlite_match_query("^bar").as_deref(), Some("\"bar\""));
        assert_eq!(sqlite_match_query("-baz").as_deref(), Some("\"baz\""));
        assert_eq!(
            sqlite_match_query("col:val").as_deref(),
            Some("\"col\" OR \"val\"")
        );
        assert_eq!(
            sqlite_match_query("café naïve 日本語").as_deref(),
            Some("\"café\" OR \"naïve\" OR \"日本語\"")
        );
        assert_eq!(
            pg_query_terms("café naïve 日本語").as_deref(),
            Some("café | naïve | 日本語")
        );
        assert_eq!(
            pg_query_terms("foo' | bar & !baz <-> qux:*").as_deref(),
            Some("foo | bar | baz | qux")
        );
    }

    #[test]
    fn stop_words_are_sorted_and_left_out_unless_alone() {
        assert!(
            STOP_WORDS.windows(2).all(|w| w[0] < w[1]),
            "binary search needs order"
        );
        assert_eq!(
            search_terms("how are the invoices stored"),
            ["invoices", "stored"]
        );
        assert_eq!(search_terms("who are you"), ["who", "are", "you"]);
        // A long question's content word past the 32nd distinct token is
        // still searched: stop words go before the cap.
        let long = format!("{} pgbouncer", STOP_WORDS[..40].join(" "));
        assert_eq!(search_terms(&long), ["pgbouncer"]);
    }

    #[test]
    fn no_terms_is_none() {
        for input in ["", "   ", "\"", "'", "🎉🎉", "()*:^-+", "\n\t"] {
            assert_eq!(sqlite_match_query(input), None, "{input:?}");
            assert_eq!(pg_query_terms(input), None, "{input:?}");
        }
    }

    #[test]
    fn terms_are_distinct_and_capped() {
        assert_eq!(query_terms("a A a b B"), vec!["a", "b"]);
        let many: String = (0..100).map(|i| format!("w{i} ")).collect();
        let terms = query_terms(&many);
        assert_eq!(terms.len(), MAX_QUERY_TERMS);
        assert_eq!(terms.first().map(String::as_str), Some("w0"));
        assert_eq!(terms.last().map(String::as_str), Some("w31"));
        let q = sqlite_match_query(&many).unwrap();
        assert_eq!(q.matches(" OR ").count(), MAX_QUERY_TERMS - 1);
        let p = pg_query_terms(&many).unwrap();
        assert_eq!(p.matches(" | ").count(), MAX_QUERY_TERMS - 1);
    }
}
