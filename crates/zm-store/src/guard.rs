//! The content guard: deterministic secret detection.
//!
//! Every piece of text a caller asks us to store is scanned by a fixed,
//! ordered list of detectors. The first detector that fires wins; the
//! refusal names the field, the detector id and a masked sample (the first
//! six characters of the match followed by `…`). The secret itself never
//! leaves this module.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};
use zm_contracts::{ToolError, prefixes::Prefix};

/// A secret found in a named field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretHit {
    /// The field the secret was found in (e.g. `content`, `source.items[2].x`).
    pub field: String,
    /// The detector id (e.g. `github-token`).
    pub detector: &'static str,
    /// The first six characters of the match followed by `…`.
    pub masked: String,
}

/// Extra check applied to a regex match (the regex crate has no lookaround).
type Accept = fn(text: &str, start: usize, end: usize) -> bool;

struct Detector {
    id: &'static str,
    re: Regex,
    accept: Option<Accept>,
}

impl Detector {
    fn new(id: &'static str, pattern: &str, accept: Option<Accept>) -> Self {
        Detector {
            id,
            re: Regex::new(pattern).expect("guard detector pattern compiles"),
            accept,
        }
    }

    /// The first accepted match, as a byte range.
    ///
    /// When a match is refused by `accept`, the search restarts one character
    /// after the refused match's start, so a secret overlapping a refused
    /// candidate is still found (emulating a lookahead).
    fn find(&self, text: &str) -> Option<(usize, usize)> {
        let mut at = 0;
        while at <= text.len() {
            let m = self.re.find_at(text, at)?;
            match self.accept {
                Some(accept) if !accept(text, m.start(), m.end()) => {
                    let step = text[m.start()..].chars().next().map_or(1, char::len_utf8);
                    at = m.start() + step;
                }
                _ => return Some((m.start(), m.end())),
            }
        }
        None
    }
}

/// `sk-` not followed by `ant-` (Anthropic keys have their own detector),
/// and not a kebab-case name that starts with `sk-` (a `SK-1234` ticket's
/// branch, `sk-prod-payments-worker-7f9c`): lowercase words, none longer
/// than [`NAME_WORD_MAX`]. A key's body is one long run (OpenAI's mix
/// cases; OpenRouter's `sk-or-v1-…` and others are 32 or 64 lowercase hex
/// digits), so every key is still one.
fn openai_like(text: &str, start: usize, end: usize) -> bool {
    let m = &text[start..end];
    let a_name = !m.bytes().any(|b| b.is_ascii_uppercase())
        && m.split(['-', '_']).all(|w| w.len() <= NAME_WORD_MAX);
    !text[start..].starts_with("sk-ant-") && !a_name
}

/// The longest word of a kebab-case name [`openai_like`] lets pass.
const NAME_WORD_MAX: usize = 12;

/// A `scheme://user:password@` match is credentials, unless the `@` is in
/// an address's path, query or fragment: after a port (digits, none, or a
/// placeholder: `host:8080/a@b`, `host:/a@b`, `localhost:${PORT}/@vite`,
/// `host:3000?to=a@b`), after a host's name and a path
/// (`github.com:org/repo.git@v1`), or in an IPv6 address
/// (`http://[::1]:5173/@vite`); nor when the password is a placeholder
/// ([`not_a_placeholder`]).
fn url_credentials(text: &str, start: usize, end: usize) -> bool {
    let m = &text[start..end];
    let after_scheme = m.find("://").map_or(0, |i| i + 3);
    let Some(colon) = m[after_scheme..].find(':') else {
        return true;
    };
    let user = &m[after_scheme..after_scheme + colon];
    let password = &m[after_scheme + colon + 1..m.len() - 1];
    if user.starts_with('[') {
        return false;
    }
    if let Some(cut) = password.find(['/', '?', '#']) {
        let port = &password[..cut];
        let a_port = if port.is_empty() {
            // `redis://:/pw@host` has no host to have a port.
            !user.is_empty()
        } else {
            port.bytes().all(|b| b.is_ascii_digit()) || !not_a_placeholder(port)
        };
        let a_host_and_path = password[cut..].starts_with('/') && user.contains('.');
        if a_port || a_host_and_path {
            return false;
        }
    }
    not_a_placeholder(password)
}

/// A URL's password is a value, not a placeholder standing for one: a variable (`$DB_PASSWORD`, `${PASS}`,
/// `%PGPASSWORD%`), a name in brackets (`<password>`, `{{db password}}`,
/// `[password]`), `****`, `xxxx`, or the word `password` itself. (The
/// refusal asks for exactly such a rephrasing.) Only those shapes: a
/// password that merely starts with `$` (`$ecretPw`) or a variable with a
/// default (`${PASS:-hunter2}`) is still a secret.
fn not_a_placeholder(password: &str) -> bool {
    // A variable's name: a letter or `_`, then letters, digits and `_`.
    let identifier = |s: &str| {
        s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    // A bare `$NAME` only in capitals (`$ecretpw` may be a password).
    let shouted = |s: &str| identifier(s) && !s.chars().any(|c| c.is_ascii_lowercase());
    // What a template puts in brackets: words, nothing else.
    let words = |s: &str| {
        !s.trim().is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ' ' | '.'))
    };
    let inside = |open: &str, close: &str| {
        password
            .strip_prefix(open)
            .and_then(|p| p.strip_suffix(close))
    };
    let placeholder = inside("${", "}").is_some_and(identifier)
        || password.strip_prefix('$').is_some_and(shouted)
        || inside("%", "%").is_some_and(identifier)
        || inside("{{", "}}").is_some_and(words)
        || inside("<", ">").is_some_and(words)
        || inside("[", "]").is_some_and(words)
        || password.chars().all(|c| matches!(c, '*' | 'x' | 'X' | '.'))
        || ["password", "pass", "passwd", "pwd", "secret"]
            .iter()
            .any(|w| password.eq_ignore_ascii_case(w));
    !placeholder
}

/// The Google key body is exactly 35 characters: the character after the
/// match must not extend it.
fn google_end_bounded(text: &str, _start: usize, end: usize) -> bool {
    !text[end..]
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

static DETECTORS: LazyLock<Vec<Detector>> = LazyLock::new(|| {
    vec![
        // PEM and OpenSSH (`-----BEGIN … PRIVATE KEY-----`), OpenPGP
        // (`… PRIVATE KEY BLOCK-----`) and RFC 4716 (`---- BEGIN SSH2
        // ENCRYPTED PRIVATE KEY ----`) armour.
        Detector::new(
            "pem-private-key",
            r"-{4,5} ?BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)? ?-{4,5}",
            None,
        ),
        Detector::new(
            "github-token",
            r"(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
            None,
        ),
        Detector::new("aws-access-key-id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", None),
        Detector::new("slack-token", r"xox[baprs]-[A-Za-z0-9-]{10,}", None),
        Detector::new(
            "jwt",
            r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
            None,
        ),
        // The user may be empty (`redis://:password@host`, as Redis
        // clients write it); the password may hold a `/` (as a generated
        // one often does, pasted unencoded), unless the `@` is in the
        // address's path ([`url_credentials`]). A scheme is at most 32
        // characters: each refused match is tried again a character
        // later, and a scheme of thousands of letters would be tried
        // thousands of times.
        Detector::new(
            "url-credentials",
            r"[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^\s@/:]{0,128}:[^\s@]{1,256}@",
            Some(url_credentials),
        ),
        // `\b` before the `sk` prefixes: `risk-assessment-…` or `task-…`
        // must not read as a key.
        Detector::new("anthropic-api-key", r"\bsk-ant-[A-Za-z0-9_-]{20,}", None),
        Detector::new(
            "openai-api-key",
            r"\bsk-[A-Za-z0-9_-]{20,}",
            Some(openai_like),
        ),
        Detector::new(
            "stripe-api-key",
            r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
            None,
        ),
        Detector::new(
            "google-api-key",
            r"AIza[A-Za-z0-9_-]{35}",
            Some(google_end_bounded),
        ),
    ]
});

/// The detector ids, in the order they are tried.
pub fn detector_ids() -> Vec<&'static str> {
    DETECTORS.iter().map(|d| d.id).collect()
}

/// The masked sample of a matched secret: its first six characters and `…`.
pub fn mask(secret: &str) -> String {
    let mut s: String = secret.chars().take(6).collect();
    s.push('…');
    s
}

/// Scan one text. Returns the first detector (in detector order) that fires,
/// with the masked sample of its match.
pub fn scan(text: &str) -> Option<(&'static str, String)> {
    DETECTORS.iter().find_map(|d| {
        d.find(text)
            .map(|(start, end)| (d.id, mask(&text[start..end])))
    })
}

/// Check many named fields in order; the first hit wins.
pub fn check_fields<'a>(fields: impl IntoIterator<Item = (String, &'a str)>) -> Option<SecretHit> {
    fields.into_iter().find_map(|(field, text)| {
        scan(text).map(|(detector, masked)| SecretHit {
            field,
            detector,
            masked,
        })
    })
}

/// Every string leaf of a JSON value, in document order, named like
/// `source.verbatim` or `source.items[2].x`. An empty `prefix` gives
/// top-level names without a leading dot. Object keys are not reported as
/// leaves (a key holding a secret would otherwise leak into the field name).
pub fn json_string_leaves(prefix: &str, v: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    collect_leaves(prefix.to_owned(), v, &mut out);
    out
}

fn collect_leaves(path: String, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::String(s) => out.push((path, s.clone())),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect_leaves(format!("{path}[{i}]"), item, out);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                collect_leaves(child, item, out);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The refusal for a hit: `validation_failed` with the
/// `secret_content_rejected:` prefix, naming the field, the detector and the
/// masked sample. Details: `{"field": …, "detector": …}`.
pub fn rejection(hit: &SecretHit) -> ToolError {
    let text = format!(
        "field `{}` appears to contain a secret (detector `{}`, starting `{}`). \
         Nothing was stored. Rephrase without the secret: describe where it \
         lives or how to obtain it instead of including its value.",
        hit.field, hit.detector, hit.masked
    );
    ToolError::validation(Prefix::SecretContentRejected.message(text)).with_details(json!({
        "field": hit.field,
        "detector": hit.detector,
        "masked": hit.masked,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zm_contracts::ErrorCode;

    // Fake secrets are assembled at run time so this file never contains
    // anything that looks like a real credential.
    fn rep(s: &str, n: usize) -> String {
        s.repeat(n)
    }

    fn alnum(n: usize) -> String {
        "aB3dE5gH7jK9mN1pQ2rS4tU6vW8xY0z"
            .chars()
            .cycle()
            .take(n)
            .collect()
    }

    fn upper_digits(n: usize) -> String {
        "Q7W2E9R4T6Y1U3I8O5P0".chars().cycle().take(n).collect()
    }

    fn pem() -> String {
        format!(
            "{}BEGIN RSA PRIVATE KEY{}\nMIIE...",
            rep("-", 5),
            rep("-", 5)
        )
    }
    fn github() -> String {
        format!("{}{}", "gh".to_owned() + "p_", alnum(36))
    }
    fn github_pat() -> String {
        format!(
            "{}{}",
            "github".to_owned() + "_pat_",
            alnum(11) + "_" + &alnum(20)
        )
    }
    fn aws() -> String {
        format!("{}{}", "AK".to_owned() + "IA", upper_digits(16))
    }
    fn slack() -> String {
        format!(
            "{}{}",
            "xo".to_owned() + "xb-",
            "1234-5678-".to_owned() + &alnum(12)
        )
    }
    fn jwt() -> String {
        format!(
            "{}{}.{}.{}",
            "ey".to_owned() + "J",
            alnum(20),
            alnum(24),
            alnum(30) + "-_"
        )
    }
    fn url_creds() -> String {
        format!(
            "postgres://{}:{}@db.internal:5432/app",
            "admin",
            "hunter2".to_owned() + "x"
        )
    }
    fn anthropic() -> String {
        format!(
            "{}{}",
            "sk".to_owned() + "-ant-",
            "api03-".to_owned() + &alnum(40)
        )
    }
    fn openai() -> String {
        format!(
            "{}{}",
            "sk".to_owned() + "-",
            "proj-".to_owned() + &alnum(40)
        )
    }
    fn stripe() -> String {
        format!("{}{}", "sk".to_owned() + "_live_", alnum(24))
    }
    fn google() -> String {
        format!("{}{}", "AI".to_owned() + "za", alnum(33) + "_-")
    }

    fn detector_of(text: &str) -> Option<&'static str> {
        scan(text).map(|(d, _)| d)
    }

    #[test]
    fn detector_order_is_fixed() {
        assert_eq!(
            detector_ids(),
            vec![
                "pem-private-key",
                "github-token",
                "aws-access-key-id",
                "slack-token",
                "jwt",
                "url-credentials",
                "anthropic-api-key",
                "openai-api-key",
                "stripe-api-key",
                "google-api-key",
            ]
        );
    }

    #[test]
    fn each_detector_fires() {
        let cases: Vec<(String, &str)> = vec![
            (pem(), "pem-private-key"),
            (
                format!("{}BEGIN PRIVATE KEY{}", rep("-", 5), rep("-", 5)),
                "pem-private-key",
            ),
            (
                format!("{}BEGIN OPENSSH PRIVATE KEY{}", rep("-", 5), rep("-", 5)),
                "pem-private-key",
            ),
            (
                format!("{}BEGIN ENCRYPTED PRIVATE KEY{}", rep("-", 5), rep("-", 5)),
                "pem-private-key",
            ),
            (github(), "github-token"),
            (github_pat(), "github-token"),
            (aws(), "aws-access-key-id"),
            (format!("ASIA{}", upper_digits(16)), "aws-access-key-id"),
            (slack(), "slack-token"),
            (jwt(), "jwt"),
            (url_creds(), "url-credentials"),
            (
                format!("https://{}:{}@example.com/", "bob", "s3cr3t"),
                "url-credentials",
            ),
            (
                format!(
                    "{}BEGIN PGP PRIVATE KEY BLOCK{}\n\nlQdGBF",
                    rep("-", 5),
                    rep("-", 5)
                ),
                "pem-private-key",
            ),
            (
                format!(
                    "{}BEGIN SSH2 ENCRYPTED PRIVATE KEY{}",
                    rep("-", 4) + " ",
                    " ".to_string() + &rep("-", 4)
                ),
                "pem-private-key",
            ),
            (
                format!("redis://:{}@cache:6379/0", "s3cr3t".to_owned() + "Pw"),
                "url-credentials",
            ),
            // A generated password with a `/` in it, pasted unencoded.
            (
                format!(
                    "postgres://admin:{}@db.internal:5432/app",
                    "Zx9/Qp2".to_owned() + "+Lm"
                ),
                "url-credentials",
            ),
            (
                format!("redis://:{}@cache", "a/".to_owned() + "b"),
                "url-credentials",
            ),
            (
                format!("redis://:{}@cache", "/s3".to_owned() + "cret"),
                "url-credentials",
            ),
            // A scheme longer than 32 characters still matches (by its end).
            (
                format!("{}://u:{}@h", "a".repeat(40), "s3cr3t".to_owned() + "Pw"),
                "url-credentials",
            ),
            (
                format!("postgres://app:{}@db/app", "pa?ss".to_owned() + "word"),
                "url-credentials",
            ),
            // Long users and passwords too.
            (
                format!("postgres://{}:{}@db/app", "u".repeat(100), "p".repeat(200)),
                "url-credentials",
            ),
            (
                format!("postgres://app:{}@db:5432/app", "Pa55".to_owned() + "word$"),
                "url-credentials",
            ),
            // A password that starts with `$`, or a variable with a real
            // default, is no placeholder.
            (
                format!("postgres://app:{}@db:5432/app", "$ecret".to_owned() + "Pw9"),
                "url-credentials",
            ),
            (
                format!(
                    "postgres://app:{}@db:5432/app",
                    "${DB_PASS:-".to_owned() + "hunter2}"
                ),
                "url-credentials",
            ),
            // Lowercase `sk-` keys of other providers: one long run.
            (
                format!("sk-or-v1-{}", "0123456789abcdef".repeat(4)),
                "openai-api-key",
            ),
            (
                format!("sk-{}", "0123456789abcdef".repeat(2)),
                "openai-api-key",
            ),
            (anthropic(), "anthropic-api-key"),
            (openai(), "openai-api-key"),
            (stripe(), "stripe-api-key"),
            (format!("rk_test_{}", alnum(16)), "stripe-api-key"),
            (google(), "google-api-key"),
        ];
        for (secret, want) in cases {
            // bare, and embedded in prose
            assert_eq!(detector_of(&secret), Some(want), "bare {want}");
            let prose = format!("The value is {secret} (do not share).");
            assert_eq!(detector_of(&prose), Some(want), "embedded {want}");
            let quoted = format!("export TOKEN=\"{secret}\"\n");
            assert_eq!(detector_of(&quoted), Some(want), "quoted {want}");
        }
    }

    #[test]
    fn masked_sample_is_first_six_chars() {
        let (d, masked) = scan(&format!("token: {}", github())).unwrap();
        assert_eq!(d, "github-token");
        assert_eq!(masked, format!("{}…", &github()[..6]));
        assert_eq!(masked.chars().count(), 7);
        let (_, masked) = scan(&anthropic()).unwrap();
        assert_eq!(masked, "sk-ant…");
        let (_, masked) = scan(&aws()).unwrap();
        assert_eq!(masked, format!("{}…", &aws()[..6]));
        assert_eq!(mask("ab"), "ab…");
        assert_eq!(mask("日本語のテキスト"), "日本語のテキ…");
    }

    #[test]
    fn negatives_do_not_fire() {
        let negatives: Vec<String> = vec![
            "".into(),
            "Plain prose about postgres indexes and ranking.".into(),
            "mail me at jane.doe+memo@example.co.uk or ops@corp.example".into(),
            "call +1 (555) 010-9999 or 020 7946 0958".into(),
            // sha256 hex
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".into(),
            // git SHAs
            "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 fixed it (short 9fceb02)".into(),
            // UUIDs
            "id 123e4567-e89b-12d3-a456-426614174000".into(),
            "mem_01HZX3J4K5M6N7P8Q9R0S1T2U3 and mem_7f3a9c".into(),
            // URLs without credentials
            "https://example.com/a:b@c".into(),
            "https://example.com/path/a:b@c?x=1".into(),
            // A port and a path with an `@` in it.
            "https://example.com:8080/users/@alice".into(),
            "https://example.com:/p@x".into(),
            "http://localhost:${PORT}/@vite/client".into(),
            "http://localhost:$PORT/@fs/x".into(),
            "http://[::1]:5173/@vite/client".into(),
            "git+ssh://github.com:org/repo.git@v1".into(),
            "http://localhost:8080?email=a@b.com".into(),
            "http://localhost:3000#/@x".into(),
            "postgres://localhost:5432/db".into(),
            "https://github.com/org/zero-memory.git".into(),
            "ssh://git@github.com/org/repo.git".into(),
            "git@github.com:org/repo.git".into(),
            "http://[::1]:8080/health".into(),
            // sk- followed by short text
            "sk-short".into(),
            "use sk-learn for that".into(),
            format!("sk-{}", alnum(19)),
            // sk-ant- with too little body must not fall through to openai
            format!("sk-ant-{}", alnum(15)),
            format!("sk-ant-{}", alnum(19)),
            // prose with a long hyphenated word containing "sk-"
            "the risk-assessment-for-the-quarterly-report is due".into(),
            "task-implement_the_memory_server_now".into(),
            // the prefix alone
            "ghp_".into(),
            "the ghp_ prefix marks GitHub personal access tokens".into(),
            format!("ghp_{}", alnum(35)),
            // AKIA + 15
            format!("AKIA{}", upper_digits(15)),
            // AKIA + 17 (not word-bounded)
            format!("AKIA{}", upper_digits(17)),
            "xoxb-short".into(),
            "eyJhbGciOi.short.x".into(),
            format!("{}BEGIN PUBLIC KEY{}", rep("-", 5), rep("-", 5)),
            format!("{}BEGIN CERTIFICATE{}", rep("-", 5), rep("-", 5)),
            format!("sk_live_{}", alnum(15)),
            format!("AIza{}", alnum(34)),
            format!("AIza{}", alnum(36)),
            "🎉 unicode 日本語 naïve café".into(),
            format!("{}BEGIN PGP PUBLIC KEY BLOCK{}", rep("-", 5), rep("-", 5)),
            // A lowercase kebab-case name that starts with sk- is no key.
            "git checkout sk-1234-fix-login-redirect-loop".into(),
            "the sk-prod-payments-worker-7f9c pod restarted".into(),
            // A connection string whose password is a placeholder: what
            // the refusal asks an agent to write instead.
            "postgres://${DB_USER}:${DB_PASSWORD}@db:5432/app".into(),
            "postgres://$PGUSER:$PGPASSWORD@db/app".into(),
            "mongodb+srv://<username>:<password>@cluster0.x.mongodb.net/".into(),
            "mysql://root:%MYSQL_PASSWORD%@localhost/app".into(),
            "amqp://guest:{{rabbit_password}}@mq:5672".into(),
            "redis://:****@cache:6379/0".into(),
            "postgres://user:password@localhost/db".into(),
        ];
        for text in negatives {
            assert_eq!(scan(&text), None, "false positive on {text:?}");
        }
    }

    #[test]
    fn openai_skips_anthropic_but_finds_overlapping_key() {
        // An sk-ant- key is always the anthropic detector.
        assert_eq!(detector_of(&anthropic()), Some("anthropic-api-key"));
        // A refused candidate must not hide a later openai key.
        let text = format!("sk-ant-{} then sk-{}", alnum(15), alnum(30));
        assert_eq!(detector_of(&text), Some("openai-api-key"));
    }

    #[test]
    fn first_detector_in_order_wins() {
        // google appears first in the text, but github is earlier in order.
        let text = format!("{} and {}", google(), github());
        assert_eq!(detector_of(&text), Some("github-token"));
    }

    #[test]
    fn check_fields_first_hit_wins() {
        let clean = "nothing here";
        let a = aws();
        let g = github();
        let hit = check_fields(vec![
            ("content".to_owned(), clean),
            ("title".to_owned(), a.as_str()),
            ("tags[0]".to_owned(), g.as_str()),
        ])
        .unwrap();
        assert_eq!(hit.field, "title");
        assert_eq!(hit.detector, "aws-access-key-id");
        assert_eq!(hit.masked, mask(&a));
        assert_eq!(
            check_fields(vec![("content".to_owned(), clean), ("x".to_owned(), "")]),
            None
        );
        assert_eq!(check_fields(Vec::<(String, &str)>::new()), None);
    }

    #[test]
    fn json_leaves_have_paths() {
        let v = json!({
            "verbatim": "hello",
            "items": [ {"x": "one"}, 7, {"x": "two", "y": [null, "deep"]} ],
            "n": 3,
            "b": true,
            "z": null
        });
        let mut leaves = json_string_leaves("source", &v);
        leaves.sort();
        let want: Vec<(String, String)> = vec![
            ("source.items[0].x".into(), "one".into()),
            ("source.items[2].x".into(), "two".into()),
            ("source.items[2].y[1]".into(), "deep".into()),
            ("source.verbatim".into(), "hello".into()),
        ];
        assert_eq!(leaves, want);
        assert_eq!(
            json_string_leaves("", &json!({"a": "x", "b": ["y"]})),
            vec![
                ("a".to_owned(), "x".to_owned()),
                ("b[0]".to_owned(), "y".to_owned())
            ]
        );
        assert_eq!(
            json_string_leaves("meta", &json!("s")),
            vec![("meta".to_owned(), "s".to_owned())]
        );
        assert!(json_string_leaves("meta", &json!(42)).is_empty());
    }

    #[test]
    fn json_leaves_feed_check_fields() {
        let secret = stripe();
        let v = json!({"items": ["fine", {"note": format!("key={secret}")}]});
        let leaves = json_string_leaves("source", &v);
        let hit = check_fields(leaves.iter().map(|(k, s)| (k.clone(), s.as_str()))).unwrap();
        assert_eq!(hit.field, "source.items[1].note");
        assert_eq!(hit.detector, "stripe-api-key");
    }

    #[test]
    fn rejection_names_field_and_detector_without_the_secret() {
        for secret in [
            pem(),
            github(),
            aws(),
            slack(),
            jwt(),
            url_creds(),
            anthropic(),
            openai(),
            stripe(),
            google(),
        ] {
            let text = format!("remember: {secret}");
            let hit = check_fields([("content".to_owned(), text.as_str())]).unwrap();
            let err = rejection(&hit);
            assert_eq!(err.code, ErrorCode::ValidationFailed);
            assert!(err.message.starts_with("secret_content_rejected:"));
            assert!(err.has_prefix(Prefix::SecretContentRejected));
            assert!(err.message.contains("`content`"));
            assert!(err.message.contains(hit.detector));
            assert!(err.message.contains(&hit.masked));
            assert!(err.message.to_lowercase().contains("rephrase"));
            let details = err.details.clone().unwrap();
            assert_eq!(
                details,
                json!({"field": "content", "detector": hit.detector, "masked": hit.masked})
            );
            let whole = serde_json::to_string(&err.to_json()).unwrap();
            assert!(!err.message.contains(&secret));
            assert!(!whole.contains(&secret));
            // not even a long prefix of the secret body
            let long_prefix: String = secret.chars().take(12).collect();
            assert!(!whole.contains(&long_prefix), "leaked {long_prefix}");
        }
    }
}
