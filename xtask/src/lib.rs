//! `cargo xtask`: the contract checks and project chores.
//!
//! The checks live here as functions over plain data so that tests can
//! plant bad cases and see each check fail.

pub mod behaviour;
pub mod checks;
pub mod diff;
pub mod docs;

use std::path::{Path, PathBuf};

use serde_json::Value;
use zm_contracts::deprecations::Ledger;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

pub const SNAPSHOT: &str = "contract/snapshot.json";
pub const CONTRACT_DOC: &str = "docs/CONTRACT.md";
pub const DEPRECATIONS_DOC: &str = "docs/DEPRECATIONS.md";
pub const LEDGER: &str = "deprecations.toml";

/// The snapshot file's text for a contract document.
pub fn snapshot_text(doc: &Value) -> String {
    let mut s = serde_json::to_string_pretty(doc).expect("contract serialises");
    s.push('\n');
    s
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(root().join(path)).ok()
}

/// One named check's outcome.
pub struct Outcome {
    pub name: &'static str,
    pub result: Result<(), Vec<String>>,
}

/// The ledger as committed on disk (not the copy compiled into the crate,
/// so an edit is checked before a rebuild).
pub fn ledger_on_disk() -> Result<Ledger, String> {
    let text = read(LEDGER).ok_or_else(|| format!("{LEDGER} is missing"))?;
    Ledger::parse(&text).map_err(|e| format!("{LEDGER} does not parse: {e}"))
}

/// Run every contract check against the workspace.
pub fn run_checks() -> Vec<Outcome> {
    let built = zm_contracts::contract::contract_document();
    let mut out = vec![
        Outcome {
            name: "description budget",
            result: checks::check_description_budget(&built),
        },
        Outcome {
            name: "annotation completeness",
            result: checks::check_annotations(&built),
        },
    ];
    let ledger = ledger_on_disk();
    out.push(Outcome {
        name: "deprecations ledger",
        result: match &ledger {
            Ok(l) => checks::check_ledger(l, &built),
            Err(e) => Err(vec![e.clone()]),
        },
    });
    out.push(Outcome {
        name: "contract snapshot",
        result: match read(SNAPSHOT).map(|t| serde_json::from_str::<Value>(&t)) {
            Some(Ok(snap)) => checks::check_snapshot(&snap, &built),
            Some(Err(e)) => Err(vec![format!("{SNAPSHOT} is not JSON: {e}")]),
            None => Err(vec![format!(
                "{SNAPSHOT} is missing: run `cargo xtask contract`"
            )]),
        },
    });
    out.push(Outcome {
        name: "annotations match behaviour",
        result: match behaviour::observe_all() {
            Ok(observed) => behaviour::check_behaviour(&observed, |t| t.spec().annotations),
            Err(e) => Err(vec![format!(
                "could not run the tools on a scratch store: {e}"
            )]),
        },
    });
    out.push(Outcome {
        name: "generated docs",
        result: {
            let mut errs = Vec::new();
            if let Err(e) = checks::check_generated(
                CONTRACT_DOC,
                read(CONTRACT_DOC).as_deref(),
                &docs::render_contract(&built),
            ) {
                errs.extend(e);
            }
            if let Ok(l) = &ledger
                && let Err(e) = checks::check_generated(
                    DEPRECATIONS_DOC,
                    read(DEPRECATIONS_DOC).as_deref(),
                    &docs::render_deprecations(l),
                )
            {
                errs.extend(e);
            }
            if errs.is_empty() { Ok(()) } else { Err(errs) }
        },
    });
    out.push(Outcome {
        name: "unsafe code confined",
        result: unsafe_confined(),
    });
    out.push(Outcome {
        name: "crate lints follow the workspace",
        result: lints_follow_workspace(),
    });
    out.push(Outcome {
        name: "docs name the current contract version",
        result: docs_name_the_contract_version(),
    });
    out
}

/// The hand-written places that state the contract version (README's
/// overview, CLI.md's `--version` line) say the current one: they are
/// prose, so no generator keeps them true.
pub fn docs_name_the_contract_version() -> Result<(), Vec<String>> {
    let current = zm_contracts::CONTRACT_VERSION;
    let mut errs = Vec::new();
    for (path, before, after) in [
        ("README.md", "(now **", "**)"),
        ("docs/CLI.md", "(contract ", ")"),
    ] {
        let Some(text) = read(path) else {
            errs.push(format!("{path}: missing"));
            continue;
        };
        let stated = text
            .split(before)
            .nth(1)
            .and_then(|rest| rest.split(after).next());
        match stated {
            Some(v) if v == current => {}
            Some(v) => errs.push(format!(
                "{path} says contract {v}, CONTRACT_VERSION is {current}"
            )),
            None => errs.push(format!("{path}: no `{before}X.Y.Z{after}` found")),
        }
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// The workspace's and every crate's manifest, checked by
/// [`checks::check_lints`].
pub fn lints_follow_workspace() -> Result<(), Vec<String>> {
    let parse = |rel: &str| -> Result<toml::Value, Vec<String>> {
        let text = read(rel).ok_or_else(|| vec![format!("{rel} is missing")])?;
        toml::from_str(&text).map_err(|e| vec![format!("{rel} does not parse: {e}")])
    };
    let workspace = parse("Cargo.toml")?;
    let members: Vec<String> = workspace
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(toml::Value::as_str)
        .flat_map(|m| match m.strip_suffix("/*") {
            // `crates/*`: every directory there with a manifest.
            Some(dir) => {
                let mut found: Vec<String> = std::fs::read_dir(root().join(dir))
                    .into_iter()
                    .flatten()
                    .filter_map(Result::ok)
                    .filter(|e| e.path().join("Cargo.toml").is_file())
                    .map(|e| format!("{dir}/{}/Cargo.toml", e.file_name().to_string_lossy()))
                    .collect();
                found.sort();
                found
            }
            None => vec![format!("{m}/Cargo.toml")],
        })
        .collect();
    if members.is_empty() {
        return Err(vec!["Cargo.toml: no workspace members found".to_string()]);
    }
    let mut crates = Vec::with_capacity(members.len());
    for m in members {
        crates.push((m.clone(), parse(&m)?));
    }
    checks::check_lints(&workspace, &crates)
}

/// Every Rust source of the workspace's crates and tools, checked by
/// [`checks::check_unsafe_confined`].
pub fn unsafe_confined() -> Result<(), Vec<String>> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|x| x == "rs")
                && let Ok(text) = std::fs::read_to_string(&p)
            {
                let rel = p.strip_prefix(root).unwrap_or(&p);
                out.push((rel.to_string_lossy().replace('\\', "/"), text));
            }
        }
    }
    let root = root();
    let mut files = Vec::new();
    for top in ["crates", "xtask"] {
        walk(&root.join(top), &root, &mut files);
    }
    checks::check_unsafe_confined(&files)
}

/// Regenerate the snapshot and the docs, refusing when the version bump is
/// too small for the changes.
pub fn regenerate() -> Result<Vec<String>, Vec<String>> {
    let built = zm_contracts::contract::contract_document();
    if let Some(Ok(snap)) = read(SNAPSHOT).map(|t| serde_json::from_str::<Value>(&t)) {
        let report = checks::compare_snapshot(&snap, &built).map_err(|e| vec![e])?;
        if !report.bump_sufficient() {
            let mut errs = report.describe();
            errs.push(format!(
                "refusing to regenerate: bump CONTRACT_VERSION by at least a {} first",
                report.required.as_str()
            ));
            return Err(errs);
        }
    }
    let ledger = ledger_on_disk().map_err(|e| vec![e])?;
    let files = [
        (SNAPSHOT, snapshot_text(&built)),
        (CONTRACT_DOC, docs::render_contract(&built)),
        (DEPRECATIONS_DOC, docs::render_deprecations(&ledger)),
    ];
    let mut written = Vec::new();
    for (path, text) in files {
        let full = root().join(path);
        if let Some(dir) = full.parent() {
            std::fs::create_dir_all(dir).map_err(|e| vec![format!("{path}: {e}")])?;
        }
        if std::fs::read_to_string(&full).ok().as_deref() != Some(text.as_str()) {
            std::fs::write(&full, text).map_err(|e| vec![format!("{path}: {e}")])?;
            written.push(path.to_string());
        }
    }
    Ok(written)
}
