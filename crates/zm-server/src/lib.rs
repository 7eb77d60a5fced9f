//! # zm-server — the `zero-memory` binary
//!
//! The command line ([`cli`]), the configuration ([`config`]: every knob
//! declared once, resolved flag > `ZM_*` environment > TOML file > default;
//! each subcommand takes only the option groups it uses), the subcommands
//! ([`commands`], [`import`]), the first-start bootstrap of the owner
//! account ([`bootstrap`]), private local files ([`files`]), the HTTP
//! server ([`serve`]) and the background embedder of hybrid recall
//! ([`embedder`]).
//!
//! Exit codes: 0 success, 1 failure (invalid configuration, a command that
//! failed), 2 command-line usage error. Logs go to stderr, always; stdout
//! carries only command output (and, for `stdio`, the MCP protocol).

pub mod bootstrap;
pub mod cli;
pub mod commands;
pub mod config;
pub mod embedder;
pub mod files;
pub mod import;
pub mod serve;
pub mod team;

pub use config::Config;
