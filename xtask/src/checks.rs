//! The contract checks run by `cargo xtask check`. Each works on plain data
//! (the contract document, the ledger) so a test can plant a bad case.

use serde_json::Value;
use zm_contracts::catalogue::DESCRIPTION_BUDGET;
use zm_contracts::deprecations::Ledger;
use zm_contracts::{Access, ToolName};

use crate::diff::{Bump, Change, Class, diff_contracts};

/// Every description fits the client-visible budget (bytes of UTF-8).
pub fn check_description_budget(doc: &Value) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    for t in doc["tools"].as_array().into_iter().flatten() {
        let name = t["name"].as_str().unwrap_or("?");
        let size = t["description"].as_str().map_or(0, str::len);
        if size > DESCRIPTION_BUDGET {
            errs.push(format!(
                "tool `{name}`: description is {size} bytes, over the {DESCRIPTION_BUDGET}-byte budget"
            ));
        }
        if size == 0 {
            errs.push(format!("tool `{name}`: description is empty"));
        }
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// Every tool declares all four hints; `openWorldHint` is false;
/// `readOnlyHint` is true exactly for the read tools; read tools are
/// idempotent and not destructive.
pub fn check_annotations(doc: &Value) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    for t in doc["tools"].as_array().into_iter().flatten() {
        let name = t["name"].as_str().unwrap_or("?");
        let a = &t["annotations"];
        for hint in [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ] {
            if !a[hint].is_boolean() {
                errs.push(format!(
                    "tool `{name}`: annotation `{hint}` is not declared"
                ));
            }
        }
        if a["openWorldHint"] != false {
            errs.push(format!("tool `{name}`: openWorldHint must be false"));
        }
        // The declared access (the catalogue's, next to the hints) and the
        // read-only hint must agree.
        let read = ToolName::parse(name).is_some_and(|t| t.access() == Access::Read);
        if a["readOnlyHint"].is_boolean() && a["readOnlyHint"] != read {
            errs.push(format!(
                "tool `{name}`: readOnlyHint must be {read} (its declared access is {})",
                if read { "read" } else { "write" }
            ));
        }
        if read && (a["destructiveHint"] != false || a["idempotentHint"] != true) {
            errs.push(format!(
                "tool `{name}`: a read tool must be non-destructive and idempotent"
            ));
        }
        if t["title"].as_str().is_none_or(str::is_empty) {
            errs.push(format!("tool `{name}`: title is missing"));
        }
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// Does a ledger surface name something in the contract?
fn surface_exists(doc: &Value, surface: &str) -> bool {
    let tools = doc["tools"].as_array().cloned().unwrap_or_default();
    let tool = |n: &str| tools.iter().find(|t| t["name"] == n).cloned();
    if let Some(rest) = surface.strip_prefix("tool:") {
        let mut parts = rest.splitn(3, '.');
        let (name, side, field) = (parts.next().unwrap_or(""), parts.next(), parts.next());
        let Some(t) = tool(name) else { return false };
        return match (side, field) {
            (None, None) => true,
            (Some("input"), Some(f)) => t["input_schema"]["properties"].get(f).is_some(),
            (Some("output"), Some(f)) => t["output_schema"]["properties"].get(f).is_some(),
            _ => false,
        };
    }
    if let Some(uri) = surface.strip_prefix("resource:") {
        return doc["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["uri"] == uri);
    }
    if let Some(name) = surface.strip_prefix("prompt:") {
        return doc["prompts"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == name);
    }
    false
}

/// The ledger: versions parse, removals no earlier than the next major,
/// surfaces exist, and the current version has a history entry.
pub fn check_ledger(ledger: &Ledger, doc: &Value) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    let current = doc["version"]
        .as_str()
        .and_then(|v| semver::Version::parse(v).ok());
    let parse = |what: &str, v: &str, errs: &mut Vec<String>| -> Option<semver::Version> {
        match semver::Version::parse(v) {
            Ok(v) => Some(v),
            Err(e) => {
                errs.push(format!("{what}: `{v}` is not a semver version ({e})"));
                None
            }
        }
    };
    for d in &ledger.deprecated {
        let what = format!("deprecation of `{}`", d.surface);
        let since = parse(
            &format!("{what} deprecated_in"),
            &d.deprecated_in,
            &mut errs,
        );
        let removal = parse(
            &format!("{what} removal_no_earlier_than"),
            &d.removal_no_earlier_than,
            &mut errs,
        );
        if let (Some(since), Some(removal)) = (&since, &removal) {
            let next_major = semver::Version::new(since.major + 1, 0, 0);
            if *removal < next_major {
                errs.push(format!(
                    "{what}: removal {removal} is earlier than the next major after {since} ({next_major})"
                ));
            }
        }
        if let (Some(since), Some(current)) = (&since, &current)
            && since > current
        {
            errs.push(format!(
                "{what}: deprecated_in {since} is after the current version {current}"
            ));
        }
        if !surface_exists(doc, &d.surface) {
            errs.push(format!("{what}: no such surface in the contract"));
        }
        if d.replacement.trim().is_empty() {
            errs.push(format!("{what}: replacement is empty"));
        }
    }
    for b in &ledger.breaking {
        if let Some(v) = parse(
            &format!("breaking change `{}`", b.change),
            &b.version,
            &mut errs,
        ) && (v.minor != 0 || v.patch != 0)
        {
            errs.push(format!(
                "breaking change `{}`: {v} is not a major release",
                b.change
            ));
        }
    }
    for (i, h) in ledger.history.iter().enumerate() {
        parse("history entry", &h.version, &mut errs);
        // A major release tells its upgraders what broke, in the table
        // DEPRECATIONS.md asks them to read (the first release broke
        // nothing).
        if i > 0
            && h.class == zm_contracts::deprecations::ChangeClass::Breaking
            && !ledger.breaking.iter().any(|b| b.version == h.version)
        {
            errs.push(format!(
                "history entry {}: a breaking release without a [[breaking]] row",
                h.version
            ));
        }
    }
    if let Some(current) = &current
        && !ledger
            .history
            .iter()
            .any(|h| h.version == current.to_string())
    {
        errs.push(format!(
            "the ledger's history has no entry for the current version {current}"
        ));
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// The outcome of comparing the built contract with the snapshot.
#[derive(Debug)]
pub struct SnapshotReport {
    pub changes: Vec<Change>,
    pub required: Bump,
    pub actual: Bump,
    pub version_changed: bool,
}

impl SnapshotReport {
    /// Is the version bumped at least as much as the changes require?
    pub fn bump_sufficient(&self) -> bool {
        self.actual >= self.required
    }
    /// Does the snapshot equal the built contract?
    pub fn up_to_date(&self) -> bool {
        self.changes.is_empty() && !self.version_changed
    }
    pub fn describe(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .changes
            .iter()
            .map(|c| format!("[{}] {}", c.class.as_str(), c.what))
            .collect();
        out.push(format!(
            "these changes need a {} bump; the version was bumped by: {}",
            self.required.as_str(),
            self.actual.as_str()
        ));
        out
    }
}

/// Compare a committed snapshot with the built contract.
pub fn compare_snapshot(snapshot: &Value, built: &Value) -> Result<SnapshotReport, String> {
    let version = |v: &Value, what: &str| {
        v["version"]
            .as_str()
            .and_then(|s| semver::Version::parse(s).ok())
            .ok_or_else(|| format!("the {what} has no valid version"))
    };
    let old = version(snapshot, "snapshot")?;
    let new = version(built, "built contract")?;
    let changes = diff_contracts(snapshot, built);
    let worst: Option<Class> = changes.iter().map(|c| c.class).max();
    Ok(SnapshotReport {
        required: Bump::required_for(worst),
        actual: Bump::between(&old, &new),
        version_changed: old != new,
        changes,
    })
}

/// The snapshot check: passes only when the snapshot is current. When it
/// is not, the message says what changed and what bump that needs.
pub fn check_snapshot(snapshot: &Value, built: &Value) -> Result<(), Vec<String>> {
    let report = compare_snapshot(snapshot, built).map_err(|e| vec![e])?;
    if report.up_to_date() {
        return Ok(());
    }
    let mut errs = report.describe();
    if report.bump_sufficient() {
        errs.push(
            "the snapshot is out of date: run `cargo xtask contract` and commit the result".into(),
        );
    } else {
        errs.push(format!(
            "bump CONTRACT_VERSION (crates/zm-contracts/src/version.rs) by at least a {} first, then run `cargo xtask contract`",
            report.required.as_str()
        ));
    }
    Err(errs)
}

/// A generated file matches what would be generated now.
pub fn check_generated(
    path: &str,
    committed: Option<&str>,
    generated: &str,
) -> Result<(), Vec<String>> {
    match committed {
        Some(c) if c == generated => Ok(()),
        Some(_) => Err(vec![format!("{path} is stale: run `cargo xtask contract`")]),
        None => Err(vec![format!(
            "{path} is missing: run `cargo xtask contract`"
        )]),
    }
}

/// Every crate's `Cargo.toml` (path, parsed) takes the workspace's lints
/// (`workspace`, parsed): `[lints] workspace = true`, or — Cargo cannot
/// inherit the table with one lint changed — a copy of it in which
/// `unsafe_code` alone differs, and only as `deny` (`zm-embed`, whose one
/// unsafe block [`check_unsafe_confined`] keeps in place). A lint added to
/// the workspace and not to such a copy fails here.
pub fn check_lints(
    workspace: &toml::Value,
    crates: &[(String, toml::Value)],
) -> Result<(), Vec<String>> {
    let Some(wanted) = workspace.get("workspace").and_then(|w| w.get("lints")) else {
        return Err(vec!["Cargo.toml has no [workspace.lints]".to_string()]);
    };
    let mut errs = Vec::new();
    for (path, manifest) in crates {
        let Some(lints) = manifest.get("lints") else {
            errs.push(format!(
                "{path}: no [lints] (add `[lints] workspace = true`)"
            ));
            continue;
        };
        if lints.get("workspace").and_then(toml::Value::as_bool) == Some(true) {
            continue;
        }
        let groups: std::collections::BTreeSet<&String> = lints
            .as_table()
            .into_iter()
            .flatten()
            .chain(wanted.as_table().into_iter().flatten())
            .map(|(k, _)| k)
            .collect();
        for group in groups {
            let ours = lints.get(group).and_then(toml::Value::as_table);
            let theirs = wanted.get(group).and_then(toml::Value::as_table);
            let names: std::collections::BTreeSet<&String> = ours
                .into_iter()
                .flatten()
                .chain(theirs.into_iter().flatten())
                .map(|(k, _)| k)
                .collect();
            for name in names {
                let a = ours.and_then(|t| t.get(name));
                let b = theirs.and_then(|t| t.get(name));
                if a == b {
                    continue;
                }
                if group == "rust"
                    && name == UNSAFE_LINT
                    && a.and_then(toml::Value::as_str) == Some("deny")
                {
                    continue;
                }
                let show =
                    |v: Option<&toml::Value>| v.map_or("absent".to_string(), ToString::to_string);
                errs.push(format!(
                    "{path}: lint {group}::{name} is {} here and {} in the workspace",
                    show(a),
                    show(b)
                ));
            }
        }
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// Where the workspace's one unsafe block may be: `zm-embed`'s forward
/// pass (its `gemm` call). Every other crate forbids unsafe code through
/// the workspace lints; `zm-embed` only denies it, so this keeps its
/// allow-unsafe-code attribute to that one place.
pub const UNSAFE_ALLOWED_IN: &str = "crates/zm-embed/src/native.rs";

/// The lint's name, spelled in halves so that this file does not match
/// the check that counts it.
const UNSAFE_LINT: &str = concat!("unsafe", "_code");

/// `files` (path from the workspace root, text) hold one unsafe block and
/// one lint attribute naming `unsafe_code`, both in
/// [`UNSAFE_ALLOWED_IN`], and no other `unsafe` item or attribute (in code;
/// `//` comments are skipped).
pub fn check_unsafe_confined(files: &[(String, String)]) -> Result<(), Vec<String>> {
    let lint = UNSAFE_LINT;
    // Spelled in halves so that this file does not match itself.
    let keyword = concat!("unsa", "fe");
    let mut errs = Vec::new();
    for (path, text) in files {
        let (mut attributes, mut items) = (0, 0);
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains(lint) {
                attributes += 1;
            }
            // `unsafe {`, `unsafe fn`, `unsafe impl`, `unsafe extern`.
            let words: Vec<&str> = code
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '{'))
                .filter(|w| !w.is_empty())
                .collect();
            items += words
                .windows(2)
                .filter(|w| w[0] == keyword && ["{", "fn", "impl", "extern"].contains(&w[1]))
                .count();
            items += words
                .iter()
                .filter(|w| **w == format!("{keyword}{{"))
                .count();
        }
        let allowed = usize::from(path == UNSAFE_ALLOWED_IN);
        if attributes > allowed || items > allowed {
            errs.push(format!(
                "{path}: {items} unsafe block(s) or item(s) and {attributes} line(s) naming the unsafe-code lint; only {UNSAFE_ALLOWED_IN}'s one gemm call may have them"
            ));
        }
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}
