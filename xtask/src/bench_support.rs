//! What the benchmarks share: where the workspace and its release build
//! are, building and re-invoking this binary in release mode, temporary
//! directories, and figures read from `/proc`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The workspace root.
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// The release build's directory (`CARGO_TARGET_DIR` when set).
pub(crate) fn release_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| root().join("target"), PathBuf::from);
    let target = if target.is_relative() {
        root().join(target)
    } else {
        target
    };
    target.join("release")
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
    c.current_dir(root());
    c
}

/// `cargo build --release -p …` of the given packages.
pub(crate) fn build_release(packages: &[&str]) -> Result<(), String> {
    eprintln!("building in release mode (cargo build --release -p {packages:?})…");
    let mut c = cargo();
    c.args(["build", "--release", "--quiet"]);
    for p in packages {
        c.args(["-p", p]);
    }
    match c.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("the release build failed ({s})")),
        Err(e) => Err(format!("cannot run cargo: {e}")),
    }
}

/// Run the release build of this binary's `command` (after
/// [`build_release`] of `xtask`; run directly, not through `cargo run`,
/// which would select a different feature set and relink).
pub(crate) fn run_release_xtask(command: &str, args: &[String]) -> Result<(), String> {
    let xtask = release_dir().join("xtask");
    let status = Command::new(&xtask)
        .current_dir(root())
        .arg(command)
        .args(args)
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{command} failed ({s})")),
        Err(e) => Err(format!("cannot run {}: {e}", xtask.display())),
    }
}

/// A fresh directory under the system temporary directory, private to
/// this user (the server wants a private data directory).
pub(crate) fn temp_dir(label: &str) -> Result<PathBuf, String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| Duration::subsec_nanos(&d));
    let dir = std::env::temp_dir().join(format!("zm-{label}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
    }
    Ok(dir)
}

/// A `/proc/PID/status` figure in KiB (`VmHWM`, `VmRSS`); `pid` may be
/// `self`.
pub(crate) fn status_kib(pid: &str, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub(crate) fn mib(kib: u64) -> f64 {
    #[allow(clippy::cast_precision_loss, reason = "a memory size in KiB")]
    let kib = kib as f64;
    kib / 1024.0
}

/// Write a benchmark's figures as JSON (for `cargo xtask bench`'s target
/// summary).
pub(crate) fn write_figures(path: &Path, figures: &impl serde::Serialize) -> Result<(), String> {
    let text = serde_json::to_string_pretty(figures).map_err(|e| format!("figures: {e}"))?;
    std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}
