//! The scope grammar.
//!
//! A scope is an ltree-style path: labels of `[a-z0-9_]` joined by `.`.
//! Scopes a caller names must be rooted in `user`, `proj` or `team` and have
//! at least two labels. Shorthands: `core` (the caller's portable layer,
//! `user.<uid>.core`) and `personal` (`user.<uid>`); reads also accept `*`
//! (every scope the caller can see).

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Shorthand for the caller's portable core layer.
pub const CORE: &str = "core";
/// Shorthand for the caller's personal scope.
pub const PERSONAL: &str = "personal";
/// Read wildcard: every visible scope.
pub const ALL: &str = "*";

/// The three roots a caller may name.
pub const ROOTS: [&str; 3] = ["user", "proj", "team"];

/// Pattern of a caller-named scope path.
pub const PATH_PATTERN: &str = r"^(user|proj|team)(\.[a-z0-9_]+)+$";
/// Pattern of a shareable (project or team) scope path.
pub const SHAREABLE_PATTERN: &str = r"^(proj|team)(\.[a-z0-9_]+)+$";
/// Pattern of a write target: a path or one of the two shorthands.
pub const WRITE_PATTERN: &str = r"^(core|personal|(user|proj|team)(\.[a-z0-9_]+)+)$";
/// Pattern of a read scope: a write target or `*`.
pub const READ_PATTERN: &str = r"^(\*|core|personal|(user|proj|team)(\.[a-z0-9_]+)+)$";

/// The guidance every scope refusal carries.
pub const SCOPE_HELP: &str = "a scope is \"core\", \"personal\", or a path rooted in user., proj. or team. with at least two labels of [a-z0-9_] (for example proj.<owner>.<slug>); omit scope to let the server route the write";

/// Maximum length of a scope path.
pub const MAX_SCOPE_LEN: usize = 256;

/// Why a scope string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid scope {given:?}: {SCOPE_HELP}")]
pub struct ScopeError {
    pub given: String,
}

/// Is `s` a well-formed label path (`^[a-z0-9_]+(\.[a-z0-9_]+)*$`)?
pub fn is_ltree(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_SCOPE_LEN
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
}

/// Validate a caller-named path: well-formed, rooted, at least two labels.
pub fn validate_path(s: &str) -> Result<(), ScopeError> {
    let ok = is_ltree(s)
        && s.split('.').count() >= 2
        && ROOTS.contains(&s.split('.').next().unwrap_or(""));
    if ok {
        Ok(())
    } else {
        Err(ScopeError { given: s.into() })
    }
}

/// Turn an id into one label: lowercase, `-` and `.` become `_`.
pub fn label_for(id: &str) -> String {
    id.trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c == '-' || c == '.' { '_' } else { c })
        .collect()
}

/// `user.<uid>`.
pub fn personal_scope(user_id: &str) -> String {
    format!("user.{}", label_for(user_id))
}

/// `user.<uid>.core`.
pub fn core_scope(user_id: &str) -> String {
    format!("user.{}.core", label_for(user_id))
}

/// `proj.<owner>.<slug>`.
pub fn project_scope(owner_id: &str, slug: &str) -> String {
    format!("proj.{}.{}", label_for(owner_id), slug)
}

/// Is this a shareable (`proj.*` / `team.*`) scope?
pub fn is_shareable(path: &str) -> bool {
    path.starts_with("proj.") || path.starts_with("team.")
}

/// Is this a user's core scope (`user.<uid>.core`, exactly three labels)?
/// A project or team whose last label is `core` is not.
pub fn is_core(path: &str) -> bool {
    let labels: Vec<&str> = path.split('.').collect();
    matches!(labels.as_slice(), ["user", _, "core"])
}

/// Is this a personal (`user.*`) scope?
pub fn is_personal(path: &str) -> bool {
    path == "user" || path.starts_with("user.")
}

/// A scope as named by a caller, before it is resolved for that caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ScopeSpec {
    /// `core` → `user.<uid>.core`.
    Core,
    /// `personal` → `user.<uid>`.
    Personal,
    /// `*` (reads only).
    All,
    /// A validated path.
    Path(String),
}

impl ScopeSpec {
    /// Parse a write target (no `*`).
    pub fn parse_write(raw: &str) -> Result<ScopeSpec, ScopeError> {
        match raw.trim() {
            CORE => Ok(ScopeSpec::Core),
            PERSONAL => Ok(ScopeSpec::Personal),
            other => validate_path(other).map(|_| ScopeSpec::Path(other.to_string())),
        }
    }

    /// Parse a read scope (`*` allowed).
    pub fn parse_read(raw: &str) -> Result<ScopeSpec, ScopeError> {
        if raw.trim() == ALL {
            Ok(ScopeSpec::All)
        } else {
            Self::parse_write(raw)
        }
    }

    /// Resolve for a caller. `None` for `*`.
    pub fn resolve(&self, user_id: &str) -> Option<String> {
        match self {
            ScopeSpec::Core => Some(core_scope(user_id)),
            ScopeSpec::Personal => Some(personal_scope(user_id)),
            ScopeSpec::All => None,
            ScopeSpec::Path(p) => Some(p.clone()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            ScopeSpec::Core => CORE,
            ScopeSpec::Personal => PERSONAL,
            ScopeSpec::All => ALL,
            ScopeSpec::Path(p) => p,
        }
    }
}

impl fmt::Display for ScopeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

macro_rules! scope_type {
    ($name:ident, $parse:expr, $pattern:expr, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name(pub ScopeSpec);

        impl $name {
            pub fn parse(raw: &str) -> Result<Self, ScopeError> {
                ($parse)(raw).map(Self)
            }
            pub fn spec(&self) -> &ScopeSpec {
                &self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.0.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                Self::parse(&raw).map_err(serde::de::Error::custom)
            }
        }

        impl JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                stringify!($name).into()
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({
                    "type": "string",
                    "pattern": $pattern,
                    "maxLength": MAX_SCOPE_LEN,
                    "description": $doc,
                })
            }
        }
    };
}

scope_type!(
    WriteScope,
    ScopeSpec::parse_write,
    WRITE_PATTERN,
    "A write target: \"core\", \"personal\", or a scope path rooted in user., proj. or team. with at least two labels."
);
scope_type!(
    ReadScope,
    ScopeSpec::parse_read,
    READ_PATTERN,
    "A read scope: \"*\" (everything visible), \"core\", \"personal\", or a scope path rooted in user., proj. or team."
);
scope_type!(
    ScopePath,
    |raw: &str| {
        let raw = raw.trim();
        validate_path(raw).and_then(|_| {
            if is_shareable(raw) {
                Ok(ScopeSpec::Path(raw.to_string()))
            } else {
                Err(ScopeError {
                    given: raw.to_string(),
                })
            }
        })
    },
    SHAREABLE_PATTERN,
    "A project or team scope path: proj.… or team.… with at least two labels of [a-z0-9_]."
);

impl ScopePath {
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;

    #[test]
    fn only_a_users_core_scope_is_core() {
        assert!(is_core(&core_scope("usr_a")));
        for not in [
            "user.usr_a",
            "proj.usr_a.core",
            "team.core",
            "team.x.core",
            "user.usr_a.core.x",
        ] {
            assert!(!is_core(not), "{not}");
        }
    }

    #[test]
    fn paths() {
        assert!(validate_path("proj.usr_a.zero_memory").is_ok());
        assert!(validate_path("team.x").is_ok());
        assert!(validate_path("proj").is_err());
        assert!(validate_path("global.x").is_err());
        assert!(validate_path("proj.Bad").is_err());
        assert!(validate_path("proj..x").is_err());
        assert!(validate_path("proj.x.").is_err());
        assert!(validate_path("").is_err());
    }

    #[test]
    fn shorthands_and_wildcard() {
        assert_eq!(ScopeSpec::parse_write("core").unwrap(), ScopeSpec::Core);
        assert_eq!(
            ScopeSpec::parse_write("personal").unwrap(),
            ScopeSpec::Personal
        );
        assert!(ScopeSpec::parse_write("*").is_err());
        assert_eq!(ScopeSpec::parse_read("*").unwrap(), ScopeSpec::All);
        let uid = "usr_0123456789abcdef.0123456789";
        assert_eq!(
            ScopeSpec::Core.resolve(uid).unwrap(),
            "user.usr_0123456789abcdef_0123456789.core"
        );
        assert_eq!(
            ScopeSpec::Personal.resolve(uid).unwrap(),
            "user.usr_0123456789abcdef_0123456789"
        );
        assert!(is_ltree(&ScopeSpec::Core.resolve(uid).unwrap()));
    }

    #[test]
    fn patterns_agree_with_the_parser() {
        let w = Regex::new(WRITE_PATTERN).unwrap();
        let r = Regex::new(READ_PATTERN).unwrap();
        for s in [
            "core", "personal", "*", "proj.a.b", "user.x", "proj", "x.y", "proj.A", "team.a-b",
        ] {
            assert_eq!(w.is_match(s), ScopeSpec::parse_write(s).is_ok(), "{s}");
            assert_eq!(r.is_match(s), ScopeSpec::parse_read(s).is_ok(), "{s}");
        }
    }
}
