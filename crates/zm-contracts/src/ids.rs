//! Identifiers: `<prefix>_<rand16>.<ts10>`.
//!
//! A ULID split into its 16-character random part and its 10-character time
//! part, random first, in Crockford base32. Input accepts mixed case and
//! surrounding whitespace; the canonical form is lowercase.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::{SystemTime, UNIX_EPOCH};

use regex::Regex;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
/// One Crockford base32 character, either case.
pub const ID_CHAR_CLASS: &str = "[0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]";

macro_rules! id_kinds {
    ($($variant:ident => $prefix:literal, $what:literal;)*) => {
        /// The prefix registry: every kind of id the system mints — and
        /// nothing it does not. (Thread tokens start `thr_` but are signed
        /// tokens, not ids: see zm-store's `threads`.)
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum IdKind { $( #[doc = $what] $variant, )* }

        impl IdKind {
            /// Every registered kind.
            pub const ALL: &'static [IdKind] = &[$(IdKind::$variant,)*];
            /// The prefix, without the underscore.
            pub const fn prefix(self) -> &'static str {
                match self { $(IdKind::$variant => $prefix,)* }
            }
            /// What the id names.
            pub const fn describe(self) -> &'static str {
                match self { $(IdKind::$variant => $what,)* }
            }
        }
    };
}

id_kinds! {
    Request => "req", "request";
    Memory => "mem", "memory";
    Entity => "ent", "entity";
    Edge => "edg", "entity edge";
    AuditLog => "aud", "audit log row";
    OauthClient => "oac", "OAuth client";
    McpSession => "ses", "MCP session";
    User => "usr", "user";
    MemoryReview => "mrq", "memory review (conflict)";
    RuleCandidate => "rlc", "rule";
    ProjectBinding => "pbn", "project binding";
    AccessToken => "tok", "access token";
    Team => "tem", "team";
    Invitation => "inv", "team invitation";
    TeamEvent => "tev", "team audit event";
    WebSession => "wss", "dashboard sign-in session";
}

impl IdKind {
    /// Look a kind up by its prefix.
    pub fn from_prefix(prefix: &str) -> Option<IdKind> {
        IdKind::ALL.iter().copied().find(|k| k.prefix() == prefix)
    }

    /// The anchored pattern an id of this kind matches (either case,
    /// optional surrounding whitespace).
    pub fn pattern(self) -> String {
        let prefix: String = self
            .prefix()
            .chars()
            .map(|c| format!("[{}{}]", c, c.to_ascii_uppercase()))
            .collect();
        format!(r"^\s*{prefix}_{ID_CHAR_CLASS}{{16}}\.{ID_CHAR_CLASS}{{10}}\s*$")
    }

    /// Mint a new id of this kind (time-ordered within the 10-char part).
    pub fn generate(self) -> String {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let random: u128 = rand::random::<u128>() & ((1u128 << 80) - 1);
        let mut out = String::with_capacity(self.prefix().len() + 28);
        out.push_str(self.prefix());
        out.push('_');
        for i in (0..16).rev() {
            out.push(CROCKFORD[((random >> (i * 5)) & 31) as usize] as char);
        }
        out.push('.');
        for i in (0..10).rev() {
            out.push(CROCKFORD[((millis >> (i * 5)) & 31) as usize] as char);
        }
        out
    }
}

static ANY_ID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"^([a-z]{{3}})_({ID_CHAR_CLASS}{{16}})\.({ID_CHAR_CLASS}{{10}})$"
    ))
    .expect("id regex")
});

/// Why a string is not an id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("not a valid id (expected <prefix>_<16 chars>.<10 chars>)")]
    Malformed,
    #[error("unknown id prefix `{0}`")]
    UnknownPrefix(String),
    #[error("expected a {} id (`{}_…`), got a `{got}_…` id", expected.describe(), expected.prefix())]
    WrongPrefix { expected: IdKind, got: String },
}

/// Parse any registered id: trim, check shape and prefix, lowercase.
pub fn parse_any_id(raw: &str) -> Result<(IdKind, String), IdError> {
    let lowered = raw.trim().to_ascii_lowercase();
    let caps = ANY_ID.captures(&lowered).ok_or(IdError::Malformed)?;
    let prefix = caps.get(1).map(|m| m.as_str()).unwrap_or_default();
    let kind = IdKind::from_prefix(prefix).ok_or_else(|| IdError::UnknownPrefix(prefix.into()))?;
    Ok((kind, lowered))
}

/// Parse an id that must be of `kind`; returns the canonical (lowercase) form.
pub fn parse_id(kind: IdKind, raw: &str) -> Result<String, IdError> {
    let lowered = raw.trim().to_ascii_lowercase();
    let caps = ANY_ID.captures(&lowered).ok_or(IdError::Malformed)?;
    let prefix = caps.get(1).map(|m| m.as_str()).unwrap_or_default();
    if prefix != kind.prefix() {
        return Err(match IdKind::from_prefix(prefix) {
            Some(_) => IdError::WrongPrefix {
                expected: kind,
                got: prefix.into(),
            },
            None => IdError::UnknownPrefix(prefix.into()),
        });
    }
    Ok(lowered)
}

/// Does `raw` parse as an id of `kind`?
pub fn is_id(kind: IdKind, raw: &str) -> bool {
    parse_id(kind, raw).is_ok()
}

macro_rules! typed_id {
    ($name:ident, $kind:expr, $doc:literal) => {
        #[doc = $doc]
        ///
        /// Deserialising trims, checks the prefix and canonicalises to
        /// lowercase.
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            pub const KIND: IdKind = $kind;
            /// Mint a fresh id.
            pub fn generate() -> Self {
                Self(Self::KIND.generate())
            }
            /// Parse and canonicalise.
            pub fn parse(raw: &str) -> Result<Self, IdError> {
                parse_id(Self::KIND, raw).map(Self)
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
            pub fn into_string(self) -> String {
                self.0
            }
            /// Wrap a value already known to be canonical (from storage).
            pub fn from_trusted(s: impl Into<String>) -> Self {
                Self(s.into())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::parse(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
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
                let pattern = Self::KIND.pattern();
                let description = format!(
                    "A {} id: `{}_` + 16 + `.` + 10 Crockford base32 characters (canonical form lowercase).",
                    Self::KIND.describe(),
                    Self::KIND.prefix()
                );
                json_schema!({
                    "type": "string",
                    "pattern": pattern,
                    "description": description,
                })
            }
        }
    };
}

typed_id!(MemoryId, IdKind::Memory, "A memory id (`mem_…`).");
typed_id!(EntityId, IdKind::Entity, "An entity id (`ent_…`).");
typed_id!(UserId, IdKind::User, "A user id (`usr_…`).");
typed_id!(
    InvitationId,
    IdKind::Invitation,
    "A team invitation id (`inv_…`)."
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generate_parse_round_trip() {
        for kind in IdKind::ALL {
            let id = kind.generate();
            assert_eq!(parse_id(*kind, &id).unwrap(), id);
            assert_eq!(parse_any_id(&id).unwrap().0, *kind);
            assert!(Regex::new(&kind.pattern()).unwrap().is_match(&id));
        }
    }

    #[test]
    fn prefixes_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for kind in IdKind::ALL {
            assert!(
                seen.insert(kind.prefix()),
                "duplicate prefix {}",
                kind.prefix()
            );
        }
    }

    #[test]
    fn canonicalises_case_and_whitespace() {
        let id = MemoryId::parse("  MEM_0123456789ABCDEF.0123456789 ").unwrap();
        assert_eq!(id.as_str(), "mem_0123456789abcdef.0123456789");
    }

    #[test]
    fn rejects_bad_ids() {
        assert_eq!(MemoryId::parse("mem_123"), Err(IdError::Malformed));
        // `u` is not Crockford base32.
        assert_eq!(
            MemoryId::parse("mem_0123456789abcdeu.0123456789"),
            Err(IdError::Malformed)
        );
        assert!(matches!(
            MemoryId::parse("ent_0123456789abcdef.0123456789"),
            Err(IdError::WrongPrefix { .. })
        ));
        assert!(matches!(
            MemoryId::parse("zzz_0123456789abcdef.0123456789"),
            Err(IdError::UnknownPrefix(_))
        ));
        assert!(serde_json::from_str::<MemoryId>("\"nope\"").is_err());
    }
}
