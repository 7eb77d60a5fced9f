//! The command line: subcommands and their arguments.

use std::path::PathBuf;
use std::sync::LazyLock;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::ConfigArgs;

/// `0.1.0 (contract 2.1.0)`.
pub static VERSION: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} (contract {})",
        env!("CARGO_PKG_VERSION"),
        zm_contracts::CONTRACT_VERSION
    )
});

/// zero-memory: a self-hosted memory server for LLM agents (MCP over stdio
/// and Streamable HTTP, a REST API, OAuth 2.1).
#[derive(Debug, Parser)]
#[command(
    name = "zero-memory",
    propagate_version = true,
    after_help = "Every configuration flag can also be set with its ZM_* environment variable or in the --config TOML file. `zero-memory config check` shows the effective configuration and where each value came from."
)]
pub struct Cli {
    #[command(flatten)]
    pub config: ConfigArgs,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server: MCP over Streamable HTTP at /mcp, the REST API,
    /// OAuth. On the very first start (no user in the database) it creates
    /// the owner account and prints, once, how to log in and a token.
    Serve,
    /// Serve MCP on stdin/stdout as a local account of the database (the
    /// owner unless --user), attached to the project of the working directory.
    Stdio(StdioArgs),
    /// Apply pending database migrations and print the schema version.
    Migrate,
    /// Manage user accounts.
    #[command(subcommand)]
    User(UserCommand),
    /// Manage personal access tokens (zm_pat_…).
    #[command(subcommand)]
    Token(TokenCommand),
    /// List or revoke the OAuth clients a user has authorized.
    #[command(subcommand)]
    Oauth(OauthCommand),
    /// Write a user's memories as JSONL (one memory per line).
    Export(ExportArgs),
    /// Import memories: our JSONL export, or the JSONL file of the official
    /// @modelcontextprotocol/server-memory.
    Import(ImportArgs),
    /// Inspect the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Debug, Args)]
pub struct StdioArgs {
    /// Act as this user instead of the owner.
    #[arg(long, value_name = "EMAIL")]
    pub user: Option<String>,
    /// The project to attach: a repository path, git remote URL or project
    /// name [default: the working directory's `origin` remote, else its git
    /// root, else the directory itself].
    #[arg(long, value_name = "PATH_OR_REMOTE", conflicts_with = "no_project")]
    pub project: Option<String>,
    /// Start unattached: a scope-less remember is refused until a
    /// project_hint or thread names a project.
    #[arg(long)]
    pub no_project: bool,
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user (the first one becomes the owner). Without
    /// --password-stdin a strong password is generated and printed once.
    Add {
        /// The user's email address (the login name).
        email: String,
        /// Read the password from stdin (one line) instead of generating one.
        #[arg(long)]
        password_stdin: bool,
    },
    /// List the users.
    List,
    /// Set a user's password. Without --password-stdin a strong password is
    /// generated and printed once.
    Passwd {
        /// The user's email address.
        email: String,
        /// Read the password from stdin (one line) instead of generating one.
        #[arg(long)]
        password_stdin: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a personal access token; the secret goes to stdout, once.
    Create {
        /// The token's owner.
        #[arg(long, value_name = "EMAIL")]
        user: String,
        /// A label to recognise the token by.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Scope mcp:read only (read tools); the default is mcp:read + mcp:write.
        #[arg(long)]
        read_only: bool,
    },
    /// List a user's personal access tokens (never their secrets).
    List {
        /// The tokens' owner.
        #[arg(long, value_name = "EMAIL")]
        user: String,
    },
    /// Revoke one of a user's tokens.
    Revoke {
        /// The token's owner.
        #[arg(long, value_name = "EMAIL")]
        user: String,
        /// The token id (tok_…, from `token list`).
        token_id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum OauthCommand {
    /// List the OAuth clients (MCP apps) a user has authorized.
    Clients {
        /// The user who authorized them.
        #[arg(long, value_name = "EMAIL")]
        user: String,
    },
    /// Revoke a client for a user: its tokens stop working at once, and the
    /// app must sign in again.
    Revoke {
        /// The user who authorized it.
        #[arg(long, value_name = "EMAIL")]
        user: String,
        /// The client id (oac_…, from `oauth clients`).
        client_id: String,
    },
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Whose memories (every memory this user can read, live and invalidated).
    #[arg(long, value_name = "EMAIL")]
    pub user: String,
    /// Write to this file instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// The file format of `import`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportFormat {
    /// Our JSONL export (`zero-memory export`).
    Zm,
    /// The JSONL file of @modelcontextprotocol/server-memory.
    ServerMemory,
}

/// Where imported memories go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportTargetArg {
    /// The user's personal scope.
    Personal,
    /// The user's core scope.
    Core,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The importing user.
    #[arg(long, value_name = "EMAIL")]
    pub user: String,
    /// The JSONL file.
    pub file: PathBuf,
    /// The file's format.
    #[arg(long, value_enum, default_value_t = ImportFormat::Zm)]
    pub format: ImportFormat,
    /// Target scope. server-memory: default personal. zm: default by each
    /// memory's scope (core stays core, everything else goes to personal).
    #[arg(long, value_enum)]
    pub target: Option<ImportTargetArg>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Load and validate the configuration; print every knob's effective
    /// value (secrets redacted) and where it came from. Exit 1 when invalid.
    Check,
}
