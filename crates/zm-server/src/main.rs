//! The `zero-memory` binary.

fn main() {
    let arg = std::env::args().nth(1);
    match arg.as_deref() {
        Some("--version") | Some("-V") | Some("version") => {
            println!(
                "zero-memory {} (contract {})",
                env!("CARGO_PKG_VERSION"),
                zm_contracts::CONTRACT_VERSION
            );
        }
        _ => {
            eprintln!(
                "zero-memory {} (contract {})\n\nusage: zero-memory --version",
                env!("CARGO_PKG_VERSION"),
                zm_contracts::CONTRACT_VERSION
            );
            std::process::exit(2);
        }
    }
}
