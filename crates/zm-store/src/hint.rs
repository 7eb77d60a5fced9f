//! Project hint normalisation.
//!
//! A `project_hint` is whatever an agent knows about where it is working: a
//! git remote (`git@github.com:org/repo.git`, `https://github.com/org/repo`)
//! or a filesystem path (`/home/me/src/repo`, `C:\src\repo`, or just a bare
//! name like `zero-memory`). Normalisation turns it into a stable key (so
//! every spelling of the same remote resolves to the same project) and a
//! slug usable in a scope path.

use std::sync::LazyLock;

use regex::Regex;

/// The longest slug [`slugify`] produces.
pub const MAX_SLUG_LEN: usize = 64;

/// What a hint was recognised as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HintKind {
    /// A git remote; the key is `host/path`, lowercased.
    Remote,
    /// A filesystem path or bare name; the key keeps its case.
    Path,
}

impl HintKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            HintKind::Remote => "remote",
            HintKind::Path => "path",
        }
    }
}

impl std::fmt::Display for HintKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A normalised hint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProjectKey {
    pub kind: HintKind,
    /// The lookup key (`github.com/org/repo`, `/home/me/src/repo`).
    pub key: String,
    /// The slug derived from the last segment (`repo`).
    pub slug: String,
}

/// Why a hint could not be normalised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HintError {
    #[error("the project hint is empty")]
    Empty,
    #[error("no usable name can be derived from the project hint")]
    NoSlug,
}

static URL_SCHEME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-zA-Z][a-zA-Z0-9+.-]*://").expect("scheme regex compiles"));

/// Normalise a raw project hint.
pub fn normalize_project_hint(raw: &str) -> Result<ProjectKey, HintError> {
    let hint = raw.trim();
    if hint.is_empty() {
        return Err(HintError::Empty);
    }
    let (kind, key) = if let Some(m) = URL_SCHEME.find(hint) {
        (HintKind::Remote, remote_url_key(&hint[m.end()..]))
    } else if let Some(rest) = hint.strip_prefix("git@") {
        (HintKind::Remote, remote_scp_key(rest))
    } else {
        (HintKind::Path, path_key(hint))
    };
    let last = key.rsplit('/').next().unwrap_or("");
    let slug = slugify(last);
    if slug.is_empty() {
        return Err(HintError::NoSlug);
    }
    Ok(ProjectKey {
        kind,
        key: stored_key(key),
        slug,
    })
}

/// Longest key kept as it is, in bytes. A longer one (a hint of up to
/// 2,048 characters can normalise to several kilobytes of non-ASCII) is
/// kept as its SHA-256: PostgreSQL's unique index on the bindings takes
/// at most 2,704 bytes a row.
pub const MAX_KEY_BYTES: usize = 1024;

fn stored_key(key: String) -> String {
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    use sha2::Digest;
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(key.as_bytes()))
    )
}

/// `host[:port]/path` after `scheme://`, possibly with `user[:pass]@`.
fn remote_url_key(after_scheme: &str) -> String {
    // Credentials whose password holds `/`, `?` or `#` unencoded end the
    // authority early (`user:pa` of `user:pa/ss@host/…`, not a host and
    // port): what follows their `@` is the host, not a part of the
    // password kept in the key, nor a project named after the user. Any
    // other URL is read as it comes (an `@` in its path or query stays).
    let authority = &after_scheme[..after_scheme
        .find(['/', '?', '#'])
        .unwrap_or(after_scheme.len())];
    let after_scheme = match after_scheme.rfind('@') {
        Some(at) if broken_credentials(authority) && host_then_path(&after_scheme[at + 1..]) => {
            &after_scheme[at + 1..]
        }
        _ => after_scheme,
    };
    // Query and fragment are never part of a repository's identity.
    let end = after_scheme.find(['?', '#']).unwrap_or(after_scheme.len());
    let rest = &after_scheme[..end];
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let host = strip_port(strip_userinfo(authority));
    remote_key(host, path)
}

/// Is this authority (a URL's text up to its first `/`, `?` or `#`) the
/// start of credentials cut short, `user:pa`, rather than `host[:port]`
/// or credentials whole (`user:pass@host`)? A port is digits.
fn broken_credentials(authority: &str) -> bool {
    if authority.contains('@') || authority.starts_with('[') {
        return false;
    }
    authority
        .split_once(':')
        .is_some_and(|(_, after)| !after.bytes().all(|b| b.is_ascii_digit()))
}

/// Does `s` begin with a host followed by a path (what follows a URL's
/// credentials)?
fn host_then_path(s: &str) -> bool {
    s.find('/')
        .is_some_and(|slash| slash > 0 && !s[..slash].contains(['?', '#']))
}

/// `host:org/repo(.git)` after `git@` (scp-like syntax).
fn remote_scp_key(rest: &str) -> String {
    let (host, path) = match (rest.find(':'), rest.find('/')) {
        (Some(c), Some(s)) if s < c => (&rest[..s], &rest[s..]),
        (Some(c), _) => (&rest[..c], &rest[c + 1..]),
        (None, Some(s)) => (&rest[..s], &rest[s..]),
        (None, None) => (rest, ""),
    };
    remote_key(strip_userinfo(host), path)
}

fn strip_userinfo(authority: &str) -> &str {
    match authority.rfind('@') {
        Some(i) => &authority[i + 1..],
        None => authority,
    }
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        // IPv6 literal: keep through the closing bracket.
        return match host.find(']') {
            Some(i) => &host[..=i],
            None => host,
        };
    }
    match host.find(':') {
        Some(i) => &host[..i],
        None => host,
    }
}

/// `host/path`, lowercased, with no repeated, leading or trailing `/` in the
/// path and no trailing `.git`.
fn remote_key(host: &str, path: &str) -> String {
    let host = host.trim_matches('/').to_lowercase();
    let path = path.replace('\\', "/").to_lowercase();
    let mut segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // A page of the repository copied from a browser names the repository
    // (`…/org/repo/tree/main`, `…/group/repo/-/merge_requests/7`), not
    // a project of its own named `main` or `7`: GitHub's and Bitbucket's
    // repositories are `owner/name`, and GitLab's pages follow a `-`.
    if matches!(host.as_str(), "github.com" | "bitbucket.org") {
        segments.truncate(2);
    }
    if !host.is_empty()
        && let Some(dash) = segments.iter().skip(2).position(|s| *s == "-")
    {
        segments.truncate(dash + 2);
    }
    let mut path = segments.join("/");
    if let Some(stripped) = path.strip_suffix(".git") {
        path = stripped.trim_end_matches('/').to_owned();
    }
    match (host.is_empty(), path.is_empty()) {
        (_, true) => host,
        (true, false) => path,
        (false, false) => format!("{host}/{path}"),
    }
}

/// Backslashes to slashes, repeated slashes collapsed, trailing slash dropped
/// (a lone `/` stays). Case is preserved.
fn path_key(hint: &str) -> String {
    let mut out = String::with_capacity(hint.len());
    for c in hint.chars() {
        let c = if c == '\\' { '/' } else { c };
        if c == '/' && out.ends_with('/') {
            continue;
        }
        out.push(c);
    }
    if out.len() > 1 && out.ends_with('/') {
        out.pop();
    }
    // The repository's own directory, not a part of it git names: a
    // checkout's `.git` (what `git rev-parse --absolute-git-dir` prints)
    // and a trailing `.` named no project at all.
    while let Some(shorter) = out.strip_suffix("/.git").or_else(|| out.strip_suffix("/.")) {
        if shorter.is_empty() {
            break;
        }
        out.truncate(shorter.len());
    }
    out
}

/// Lowercase, drop a trailing `.git`, turn every run of characters outside
/// `[a-z0-9_]` into one `_`, collapse repeated `_`, trim `_` at both ends and
/// cap at [`MAX_SLUG_LEN`] characters. May return an empty string.
pub fn slugify(s: &str) -> String {
    let lower = s.trim().to_lowercase();
    let base = lower.strip_suffix(".git").unwrap_or(&lower);
    let mut out = String::with_capacity(base.len());
    for c in base.chars() {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
            c
        } else {
            '_'
        };
        if c == '_' && (out.is_empty() || out.ends_with('_')) {
            continue;
        }
        out.push(c);
    }
    // Only ASCII remains, so byte truncation is char-safe.
    out.truncate(MAX_SLUG_LEN);
    while out.ends_with('_') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str) -> ProjectKey {
        normalize_project_hint(raw).unwrap_or_else(|e| panic!("{raw:?}: {e}"))
    }

    #[test]
    fn a_long_key_is_kept_as_its_hash_and_a_short_one_as_it_is() {
        let short = ok("/home/dev/src/alpha-service");
        assert_eq!(short.key, "/home/dev/src/alpha-service");
        // 600 three-byte characters: 1,800 bytes once normalised.
        let long_hint = format!("/{}/web", "項".repeat(600));
        let long = ok(&long_hint);
        assert!(
            long.key.starts_with("sha256:") && long.key.len() == 71,
            "{}",
            long.key
        );
        assert_eq!(long.slug, "web");
        assert_eq!(ok(&long_hint).key, long.key, "the same hint, the same key");
        assert_ne!(ok(&format!("/{}/web", "項".repeat(601))).key, long.key);
        let at_limit = format!("/{}", "a".repeat(MAX_KEY_BYTES - 1));
        assert_eq!(
            ok(&at_limit).key,
            at_limit,
            "a key of the limit's length is kept"
        );
    }

    #[test]
    fn remote_spellings_share_one_key() {
        for raw in [
            "git@github.com:Org/Zero-Memory.git",
            "https://github.com/org/zero-memory",
            "ssh://git@github.com/org/zero-memory.git",
            "https://github.com/org/zero-memory.git",
            "https://github.com/org/zero-memory/",
            "https://github.com/org/zero-memory.git/",
            "HTTPS://GitHub.com/Org/Zero-Memory",
            "https://user@github.com/org/zero-memory",
            "https://user:pass@github.com/org/zero-memory.git",
            "https://github.com:443/org/zero-memory",
            "ssh://git@github.com:22/org/zero-memory.git",
            "git://github.com/org/zero-memory.git",
            "git+ssh://git@github.com/org/zero-memory",
            "https://github.com//org//zero-memory",
            "https://github.com/org/zero-memory?tab=readme#top",
            "  git@github.com:org/zero-memory.git \n",
        ] {
            let k = ok(raw);
            assert_eq!(k.kind, HintKind::Remote, "{raw}");
            assert_eq!(k.key, "github.com/org/zero-memory", "{raw}");
            assert_eq!(k.slug, "zero_memory", "{raw}");
        }
    }

    #[test]
    fn remote_variants() {
        let k = ok("git@gitlab.example.com:group/sub/Project.Name.git");
        assert_eq!(k.key, "gitlab.example.com/group/sub/project.name");
        assert_eq!(k.slug, "project_name");
        let k = ok("git@host/org/repo");
        assert_eq!(k.key, "host/org/repo");
        let k = ok("https://[::1]:8080/org/repo.git");
        assert_eq!(k.key, "[::1]/org/repo");
        assert_eq!(k.slug, "repo");
        // No path: the host is the last segment.
        let k = ok("https://example.com");
        assert_eq!(k.key, "example.com");
        assert_eq!(k.slug, "example_com");
        // Credentials never survive into the key.
        let k = ok("https://alice:s3cret@git.example.com/team/app");
        assert!(!k.key.contains("alice") && !k.key.contains("s3cret"));
        assert_eq!(k.key, "git.example.com/team/app");
    }

    /// A password holding `/`, `?` or `#` unencoded ends neither the host
    /// nor the path early: no part of it is in the key.
    #[test]
    fn credentials_with_delimiters_stay_out_of_the_key() {
        for hint in [
            "https://user:pa#ss@github.com/org/repo",
            "https://user:pa/ss@github.com/org/repo.git",
            "https://user:p?a@github.com/org/repo",
            "https://user:token@github.com/org/repo?x=1",
        ] {
            let k = ok(hint);
            assert_eq!(k.key, "github.com/org/repo", "{hint}");
            assert_eq!(k.slug, "repo", "{hint}");
        }
        // A host without a dot too.
        assert_eq!(
            ok("https://user:pa/ss@gitserver/org/repo").key,
            "gitserver/org/repo"
        );
        // An `@` in a path or a query is not a password's end: those URLs
        // keep the keys they had.
        for (hint, key) in [
            ("https://github.com/org/repo@v2", "github.com/org/repo@v2"),
            (
                "https://github.com/org/repo?ref=me@x.com/y",
                "github.com/org/repo",
            ),
            ("https://github.com/org/repo#x@a.b/c", "github.com/org/repo"),
            ("https://host.com/a@b.c/repo", "host.com/a@b.c/repo"),
            ("https://host.com:8443/org/repo", "host.com/org/repo"),
            ("https://[fe80::1]:8080/org/repo", "[fe80::1]/org/repo"),
        ] {
            assert_eq!(ok(hint).key, key, "{hint}");
        }
    }

    /// A repository's page copied from a browser names the repository.
    #[test]
    fn a_repositorys_web_page_names_it() {
        for hint in [
            "https://github.com/org/repo/tree/main",
            "https://github.com/org/repo/pull/42",
            "https://github.com/org/repo/blob/main/src/lib.rs",
            "https://bitbucket.org/org/repo/src/main/",
        ] {
            let k = ok(hint);
            assert_eq!(k.slug, "repo", "{hint}");
            assert!(k.key.ends_with("/org/repo"), "{hint}: {}", k.key);
        }
        let k = ok("https://gitlab.com/group/sub/repo/-/merge_requests/7");
        assert_eq!(
            (k.key.as_str(), k.slug.as_str()),
            ("gitlab.com/group/sub/repo", "repo")
        );
        // A GitLab project nested deeper keeps its groups; ssh and scp
        // spellings of GitHub keep their keys.
        assert_eq!(
            ok("https://gitlab.com/a/b/c/repo.git").key,
            "gitlab.com/a/b/c/repo"
        );
        assert_eq!(ok("git@github.com:org/repo.git").key, "github.com/org/repo");
        // Not a file URL's path.
        assert_eq!(ok("file:///srv/git/-/repo").slug, "repo");
    }

    #[test]
    fn remote_without_name_has_no_slug() {
        assert_eq!(normalize_project_hint("https://"), Err(HintError::NoSlug));
        assert_eq!(normalize_project_hint("git@"), Err(HintError::NoSlug));
        assert_eq!(
            normalize_project_hint("https:///.git"),
            Err(HintError::NoSlug)
        );
    }

    #[test]
    fn paths() {
        let k = ok("/home/me/src/zero-memory/");
        assert_eq!(k.kind, HintKind::Path);
        assert_eq!(k.key, "/home/me/src/zero-memory");
        assert_eq!(k.slug, "zero_memory");

        let k = ok("zero-memory");
        assert_eq!(k.kind, HintKind::Path);
        assert_eq!(k.key, "zero-memory");
        assert_eq!(k.slug, "zero_memory");

        let k = ok(r"C:\Users\me\My Repo");
        assert_eq!(k.kind, HintKind::Path);
        assert_eq!(k.key, "C:/Users/me/My Repo");
        assert_eq!(k.slug, "my_repo");

        let k = ok(r"C:\Users\me\My Repo\\");
        assert_eq!(k.key, "C:/Users/me/My Repo");

        let k = ok("//srv///git//Thing.git");
        assert_eq!(k.key, "/srv/git/Thing.git");
        assert_eq!(k.slug, "thing");

        // A checkout's git directory, or the checkout as `.`, is the
        // checkout.
        for hint in [
            "/home/me/repo/.git",
            r"C:\src\repo\.git\",
            "/home/me/repo/./.git",
            "/home/me/repo/.",
        ] {
            assert_eq!(ok(hint).slug, "repo", "{hint}");
        }
        assert_eq!(ok("/home/me/repo/.git").key, "/home/me/repo");

        // Case is preserved in path keys.
        assert_ne!(ok("/src/Repo").key, ok("/src/repo").key);
        assert_eq!(ok("/src/Repo").slug, ok("/src/repo").slug);
    }

    #[test]
    fn empty_and_slugless() {
        assert_eq!(normalize_project_hint(""), Err(HintError::Empty));
        assert_eq!(normalize_project_hint("  "), Err(HintError::Empty));
        assert_eq!(normalize_project_hint("\t\n"), Err(HintError::Empty));
        assert_eq!(normalize_project_hint("///"), Err(HintError::NoSlug));
        assert_eq!(normalize_project_hint("/"), Err(HintError::NoSlug));
        assert_eq!(normalize_project_hint("."), Err(HintError::NoSlug));
        assert_eq!(normalize_project_hint("/tmp/---/"), Err(HintError::NoSlug));
        assert_eq!(
            normalize_project_hint("/tmp/日本語"),
            Err(HintError::NoSlug)
        );
    }

    #[test]
    fn slugify_rules() {
        assert_eq!(slugify("Zero-Memory.git"), "zero_memory");
        assert_eq!(slugify("zero_memory"), "zero_memory");
        assert_eq!(slugify("__a--b__c__"), "a_b_c");
        assert_eq!(slugify("My  Repo!!"), "my_repo");
        assert_eq!(slugify("café"), "caf");
        assert_eq!(slugify("v2.0"), "v2_0");
        assert_eq!(slugify(".git"), "");
        assert_eq!(slugify(""), "");
        assert_eq!(slugify("---"), "");
        let long = "a".repeat(100);
        assert_eq!(slugify(&long).len(), MAX_SLUG_LEN);
        // A cut that lands after a separator does not leave a trailing `_`.
        let tricky = format!("{}-b", "a".repeat(MAX_SLUG_LEN - 1));
        let s = slugify(&tricky);
        assert!(s.len() <= MAX_SLUG_LEN && !s.ends_with('_'), "{s}");
    }

    #[test]
    fn kind_names() {
        assert_eq!(HintKind::Remote.as_str(), "remote");
        assert_eq!(HintKind::Path.as_str(), "path");
        assert_eq!(HintKind::Path.to_string(), "path");
    }
}
