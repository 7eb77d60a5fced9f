//! The deprecations ledger (`deprecations.toml` at the workspace root).

use serde::{Deserialize, Serialize};

/// The ledger file as committed, embedded at build time.
pub const LEDGER_TOML: &str = include_str!("../../../deprecations.toml");

/// A surface that still works but will go away.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deprecation {
    /// What is deprecated: `tool:<name>`, `tool:<name>.input.<field>`,
    /// `tool:<name>.output.<field>`, `resource:<uri>`, `prompt:<name>`.
    pub surface: String,
    pub deprecated_in: String,
    pub replacement: String,
    /// No earlier than the next major after `deprecated_in`.
    pub removal_no_earlier_than: String,
    #[serde(default)]
    pub note: String,
}

/// A breaking change a client must act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakingChange {
    pub change: String,
    pub version: String,
    pub client_action: String,
}

/// A change of behaviour with an unchanged shape (no version bump).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BehaviouralChange {
    pub change: String,
    pub what_to_know: String,
}

/// How a version changed the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeClass {
    Breaking,
    Additive,
    Wording,
}

/// One entry of the version history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryEntry {
    pub version: String,
    pub class: ChangeClass,
    pub summary: String,
}

/// The parsed ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    #[serde(default)]
    pub deprecated: Vec<Deprecation>,
    #[serde(default)]
    pub breaking: Vec<BreakingChange>,
    #[serde(default)]
    pub behavioural: Vec<BehaviouralChange>,
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
}

impl Ledger {
    /// Parse ledger text.
    pub fn parse(text: &str) -> Result<Ledger, toml::de::Error> {
        toml::from_str(text)
    }

    /// The committed ledger.
    pub fn committed() -> Ledger {
        Ledger::parse(LEDGER_TOML).expect("deprecations.toml parses (checked by cargo xtask check)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_ledger_records_the_session_minor() {
        let l = Ledger::committed();
        assert!(l.deprecated.is_empty());
        let h = l
            .history
            .iter()
            .find(|h| h.version == "2.1.0")
            .expect("2.1.0 entry");
        assert_eq!(h.class, ChangeClass::Additive);
        assert!(h.summary.contains("session"));
    }

    #[test]
    fn committed_ledger_records_the_interop_major() {
        let l = Ledger::committed();
        let h = l
            .history
            .iter()
            .find(|h| h.version == "3.0.0")
            .expect("3.0.0 entry");
        assert_eq!(h.class, ChangeClass::Breaking);
        let breaking: Vec<&str> = l
            .breaking
            .iter()
            .filter(|b| b.version == "3.0.0")
            .map(|b| b.change.as_str())
            .collect();
        assert!(
            breaking.iter().any(|c| c.contains("uint32")),
            "{breaking:?}"
        );
        assert!(
            breaking.iter().any(|c| c.contains("structuredContent")),
            "{breaking:?}"
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(Ledger::parse("[[deprecated]]\nsurface='tool:x'\nwhen='1'\n").is_err());
    }
}
