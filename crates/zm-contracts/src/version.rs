//! The contract version and its semver rules.

/// The version of the zero-memory contract this crate defines.
///
/// Bump rules: **major** for a breaking change to a tool's schema or
/// response (field removed or renamed, type narrowed, new required input,
/// tool withdrawn, error code changed for the same failure); **minor** for a
/// new optional field or a new tool; **patch** for descriptions and
/// documentation only. `cargo xtask check` enforces them against the
/// committed snapshot in `contract/snapshot.json`.
pub const CONTRACT_VERSION: &str = "4.9.1";

/// [`CONTRACT_VERSION`] parsed as a [`semver::Version`].
pub fn contract_version() -> semver::Version {
    semver::Version::parse(CONTRACT_VERSION).expect("CONTRACT_VERSION is valid semver")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_parses_and_is_plain_semver() {
        let v = contract_version();
        assert_eq!(v.to_string(), CONTRACT_VERSION);
        assert!(v.pre.is_empty() && v.build.is_empty());
    }
}
