//! The command line: subcommands and their arguments.
//!
//! The configuration flags come from `config.rs` as option groups; each
//! subcommand flattens the groups it uses, so its `--help` shows only
//! those. The database and logging options (and `--config`) are global:
//! every command uses them. A command's options may also be written before
//! its name (`zero-memory --listen 0.0.0.0:8787 serve`), as long as the
//! command uses them.

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::LazyLock;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::config::{
    ConfigFileOption, DatabaseOptions, HttpServerOptions, LoggingOptions, McpOptions, OwnerOptions,
};

/// `0.1.0 (contract 4.0.0)`.
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
    after_help = "Every configuration option ([env: ZM_*]) can also be set with its environment variable or in the --config TOML file (a flag beats the variable, the variable the file). `zero-memory <command> --help` lists the options of a command; `zero-memory config check` shows the effective configuration and where each value came from."
)]
pub struct Cli {
    #[command(flatten)]
    pub config_file: ConfigFileOption,
    #[command(flatten)]
    pub database: DatabaseOptions,
    #[command(flatten)]
    pub logging: LoggingOptions,
    /// `serve`'s and `stdio`'s options, before the command name.
    #[command(flatten)]
    pub http_server_before: BeforeCommand<HttpServerOptions>,
    #[command(flatten)]
    pub owner_before: BeforeCommand<OwnerOptions>,
    #[command(flatten)]
    pub mcp_before: BeforeCommand<McpOptions>,

    #[command(subcommand)]
    pub command: Command,
}

/// The command line with the version string.
pub fn command() -> clap::Command {
    Cli::command().version(VERSION.as_str())
}

/// A command's option group, accepted (hidden) before the command name:
/// `zero-memory --listen 0.0.0.0:8787 serve`. [`check_flag_placement`]
/// refuses it when the command does not take the option.
#[derive(Debug, Clone, Copy, Default)]
pub struct BeforeCommand<G>(PhantomData<G>);

impl<G> FromArgMatches for BeforeCommand<G> {
    fn from_arg_matches(_: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(BeforeCommand(PhantomData))
    }
    fn update_from_arg_matches(&mut self, _: &ArgMatches) -> Result<(), clap::Error> {
        Ok(())
    }
}

impl<G: Args> Args for BeforeCommand<G> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        G::augment_args(clap::Command::new("options"))
            .get_arguments()
            .fold(cmd, |cmd, arg| cmd.arg(arg.clone().hide(true)))
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// Refuse an option written before the command name that the command does
/// not take (`zero-memory --listen … user list`).
pub fn check_flag_placement(matches: &ArgMatches) -> Result<(), clap::Error> {
    let mut cmd = command();
    let mut path = Vec::new();
    let mut m = matches;
    while let Some((name, sub)) = m.subcommand() {
        path.push(name.to_string());
        m = sub;
    }
    let misplaced = {
        let mut leaf = &cmd;
        for name in &path {
            leaf = leaf
                .find_subcommand(name)
                .expect("a parsed subcommand exists");
        }
        cmd.get_arguments()
            .filter(|a| a.is_hide_set())
            .filter(|a| matches.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine))
            .find(|a| !leaf.get_arguments().any(|b| b.get_id() == a.get_id()))
            .map(|a| a.get_long().unwrap_or_default().to_string())
    };
    match misplaced {
        Some(long) => Err(cmd.error(
            ErrorKind::ArgumentConflict,
            format!(
                "--{long} is not an option of `zero-memory {}` (see its --help)",
                path.join(" ")
            ),
        )),
        None => Ok(()),
    }
}

/// A usage error as clap renders it (without colour), the password of
/// every URL among the command-line arguments `args` hidden wherever the
/// text quotes it: clap quotes raw arguments (`unexpected argument
/// 'postgres://zm:S3cret@…'`, `invalid value …`), and such a line ends up
/// in journald. URLs of clap's own text (a hint's
/// `postgres://USER:PASSWORD@HOST:PORT/DB`) stay as they are.
pub fn redacted_error(e: &clap::Error, args: &[String]) -> String {
    use clap::error::ContextValue;
    // Each argument whole (a password may hold a space or a quote), and
    // the value of a `--flag=value`; then the values clap's context holds.
    let mut quoted: Vec<&str> = Vec::new();
    for arg in args {
        quoted.push(arg);
        if let Some((_, value)) = arg.split_once('=') {
            quoted.push(value);
        }
    }
    for (_, value) in e.context() {
        match value {
            ContextValue::String(s) => quoted.push(s),
            ContextValue::Strings(v) => quoted.extend(v.iter().map(String::as_str)),
            _ => {}
        }
    }
    let mut text = e.render().to_string();
    for raw in quoted {
        if let Some(hidden) = without_password(raw) {
            text = text.replace(raw, &hidden);
        }
    }
    text
}

/// `raw` with the password of the URL in it hidden (`***`), when it holds
/// one; `None` when there is nothing to hide.
fn without_password(raw: &str) -> Option<String> {
    if !raw.contains("://") {
        return None;
    }
    let hidden = crate::config::redact_url(raw);
    (hidden.contains("***") && !raw.contains("***")).then_some(hidden)
}

/// The leaf commands (`serve`, `user add`, …), or those that take the
/// (visible) option with this id.
pub fn leaf_commands(option: Option<&str>) -> Vec<String> {
    fn walk(
        cmd: &clap::Command,
        path: &mut Vec<String>,
        option: Option<&str>,
        out: &mut Vec<String>,
    ) {
        let subs: Vec<&clap::Command> = cmd
            .get_subcommands()
            .filter(|s| s.get_name() != "help")
            .collect();
        if subs.is_empty() {
            let takes = |id: &str| {
                cmd.get_arguments()
                    .any(|a| a.get_id() == id && !a.is_hide_set())
            };
            if option.is_none_or(takes) {
                out.push(path.join(" "));
            }
            return;
        }
        for sub in subs {
            path.push(sub.get_name().to_string());
            walk(sub, path, option, out);
            path.pop();
        }
    }
    let mut cmd = command();
    cmd.build();
    let mut out = Vec::new();
    walk(&cmd, &mut Vec::new(), option, &mut out);
    out
}

/// The visible option with this id, anywhere in the command tree.
pub fn find_arg<'a>(cmd: &'a clap::Command, id: &str) -> Option<&'a clap::Arg> {
    cmd.get_arguments()
        .find(|a| a.get_id() == id && !a.is_hide_set())
        .or_else(|| cmd.get_subcommands().find_map(|s| find_arg(s, id)))
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server: MCP over Streamable HTTP at /mcp, the REST API
    /// at /api, OAuth. On the very first start (no user in the database) it
    /// creates the owner account and prints, once, its password and a token
    /// (to stdout, or to --first-start-output FILE).
    Serve(ServeArgs),
    /// Serve MCP on stdin/stdout as a local account of the database (the
    /// owner unless --user), attached to the project of the working
    /// directory. On a database without any user it creates the owner
    /// (--owner-email, without a password: stdio needs none).
    Stdio(StdioArgs),
    /// Apply pending database migrations and print the schema version.
    Migrate,
    /// Embed every live memory that has no vector of the model in use yet
    /// (--embedding-model, else the bundled one), as `serve` and `stdio` do
    /// in the background in hybrid mode, and wait until it is done. --all
    /// embeds every memory again.
    Reindex(ReindexArgs),
    /// Manage user accounts.
    #[command(subcommand)]
    User(UserCommand),
    /// Manage personal access tokens (zm_pat_…).
    #[command(subcommand)]
    Token(TokenCommand),
    /// List or revoke the OAuth clients a user has authorized.
    #[command(subcommand)]
    Oauth(OauthCommand),
    /// Manage teams: members share a team's memories and rules. Each
    /// command acts as a user (--as EMAIL, default the owner) and needs the
    /// role the REST API would (admin to manage members).
    #[command(subcommand)]
    Team(TeamCommand),
    /// Copy the whole database into a new, empty one, SQLite or PostgreSQL
    /// (how an installation moves between backends): users, tokens, OAuth
    /// clients, teams, every memory with its history, links, entities,
    /// conflicts and rules, the audit log, the stored vectors and the
    /// server's keys. Stop every zero-memory process on this database
    /// first: a copy during which one writes to it is refused, and keeps
    /// nothing.
    Copy(CopyArgs),
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
pub struct ServeArgs {
    #[command(flatten)]
    pub http_server: HttpServerOptions,
    #[command(flatten)]
    pub owner: OwnerOptions,
    #[command(flatten)]
    pub mcp: McpOptions,
}

#[derive(Debug, Args)]
pub struct ReindexArgs {
    /// Drop every stored vector first and embed all live memories again.
    #[arg(long)]
    pub all: bool,
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
    #[command(flatten)]
    pub owner: OwnerOptions,
    #[command(flatten)]
    pub mcp: McpOptions,
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
    /// generated and printed once. Every dashboard session of the user ends
    /// and every OAuth sign-in is revoked (the apps sign in again with the
    /// new password).
    Passwd {
        /// The user's email address.
        email: String,
        /// Read the password from stdin (one line) instead of generating one.
        #[arg(long)]
        password_stdin: bool,
        /// Also revoke every personal access token of the user.
        #[arg(long)]
        revoke_tokens: bool,
    },
    /// Disable a user: from now on every credential of the account is
    /// refused (personal tokens, OAuth tokens, the password, stdio --user).
    /// OAuth sign-ins are revoked; personal tokens work again once enabled.
    Disable {
        /// The user's email address.
        email: String,
    },
    /// Enable a disabled user again.
    Enable {
        /// The user's email address.
        email: String,
    },
    /// Make a user the server's owner (who may add accounts to a team
    /// directly, and whom stdio and team act as without --user/--as); the
    /// owner before is one no longer. Appoints one after the owner's
    /// account was erased.
    Owner {
        /// The user's email address.
        email: String,
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
        #[arg(long, conflicts_with = "allow_account_delete")]
        read_only: bool,
        /// Also grant the account:delete scope, which `delete_account`
        /// needs: a token without it can never erase the account. No token
        /// gets it unless asked for here.
        #[arg(long)]
        allow_account_delete: bool,
        /// Lifetime: hours, days or weeks (`12h`, `30d`, `90d`, `2w`);
        /// refused once past. Default: no expiry.
        #[arg(long, value_name = "DURATION", value_parser = parse_lifetime)]
        expires: Option<Lifetime>,
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

/// A team role on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TeamRoleArg {
    Admin,
    Writer,
    Reader,
}

impl From<TeamRoleArg> for zm_contracts::TeamRole {
    fn from(r: TeamRoleArg) -> Self {
        match r {
            TeamRoleArg::Admin => zm_contracts::TeamRole::Admin,
            TeamRoleArg::Writer => zm_contracts::TeamRole::Writer,
            TeamRoleArg::Reader => zm_contracts::TeamRole::Reader,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum TeamCommand {
    /// Create a team (its scope is team.SLUG); the acting user becomes its admin.
    Create {
        /// The team's slug: a lowercase letter, then 1–39 of [a-z0-9_].
        slug: String,
        /// A display name (default: the slug).
        #[arg(long)]
        name: Option<String>,
        /// Act as this user [default: the owner].
        #[arg(long = "as", value_name = "EMAIL")]
        actor: Option<String>,
    },
    /// List the teams the acting user is a member of.
    List {
        /// Act as this user [default: the owner].
        #[arg(long = "as", value_name = "EMAIL")]
        actor: Option<String>,
    },
    /// Show a team: members, roles, projects (and, to admins, invitations).
    Show {
        /// The team's slug.
        slug: String,
        /// Act as this user [default: the owner].
        #[arg(long = "as", value_name = "EMAIL")]
        actor: Option<String>,
    },
    /// Delete a team (admins): its memories become readable by nobody,
    /// exportable by its admins for 30 days, then erased. At a terminal it
    /// asks for the slug again; elsewhere it needs --yes.
    Delete {
        /// The team's slug.
        slug: String,
        /// Act as this user [default: the owner].
        #[arg(long = "as", value_name = "EMAIL")]
        actor: Option<String>,
        /// Delete without asking (for scripts; without it a terminal is
        /// asked to type the slug, and anything else is refused).
        #[arg(long)]
        yes: bool,
    },
    /// Add an existing user to a team with a role (the server's owner, as a team admin; other admins invite).
    Add {
        /// The user's email.
        email: String,
        /// The team's slug.
        #[arg(long, value_name = "SLUG")]
        team: String,
        /// The role to give.
        #[arg(long, value_enum, default_value_t = TeamRoleArg::Writer)]
        role: TeamRoleArg,
        /// Act as this user [default: the owner].
        #[arg(long = "as", value_name = "EMAIL")]
        actor: Option<String>,
    },
    /// Remove a member from a team (admins); takes effect on their next request.
    Remove {
        /// The member's email.
        email: String,
        /// The team's slug.
        #[arg(long, value_name = "SLUG")]
        team: String,
        /// Act as this user [default: the owner].
        #[arg(long = "as", value_name = "EMAIL")]
        actor: Option<String>,
    },
    /// Change a member's role (admins); takes effect on their next request.
    Role {
        /// The member's email.
        email: String,
        /// The team's slug.
        #[arg(long, value_name = "SLUG")]
        team: String,
        /// The new role.
        #[arg(long, value_enum)]
        role: TeamRoleArg,
        /// Act as this user [default: the owner].
        #[arg(long = "as", value_name = "EMAIL")]
        actor: Option<String>,
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
pub struct CopyArgs {
    /// The destination: `postgres://…` or `sqlite://PATH` (a new file is
    /// created private). It must hold no data.
    #[arg(long, value_name = "URL")]
    pub to: String,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Whose memories (every memory this user can read, live and invalidated).
    #[arg(long, value_name = "EMAIL")]
    pub user: String,
    /// Write to this file instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Memories read per page (1..=1000); each page is written before the
    /// next is read.
    #[arg(long, value_name = "N", default_value_t = zm_contracts::EXPORT_PAGE_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(zm_contracts::EXPORT_PAGE_MAX)))]
    pub page_size: u32,
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
    /// Takes every command's options.
    Check(CheckArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub http_server: HttpServerOptions,
    #[command(flatten)]
    pub owner: OwnerOptions,
    #[command(flatten)]
    pub mcp: McpOptions,
}

/// A token lifetime from the command line (`12h`, `90d`, `2w`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// Milliseconds.
    pub ms: i64,
}

/// The longest token lifetime accepted: ten years.
const MAX_LIFETIME_HOURS: i64 = 10 * 366 * 24;

/// `<N>h`, `<N>d` or `<N>w`, N a whole number ≥ 1, at most ten years.
pub fn parse_lifetime(raw: &str) -> Result<Lifetime, String> {
    let raw = raw.trim();
    let bad = || {
        format!(
            "{raw:?} is not a lifetime: write a whole number followed by h (hours), d (days) or w (weeks), e.g. 12h, 30d, 90d"
        )
    };
    let (unit_at, _) = raw.char_indices().last().ok_or_else(bad)?;
    let (n, unit) = raw.split_at(unit_at);
    let hours_per: i64 = match unit {
        "h" | "H" => 1,
        "d" | "D" => 24,
        "w" | "W" => 7 * 24,
        _ => return Err(bad()),
    };
    let n: i64 = n.parse().map_err(|_| bad())?;
    if n < 1 {
        return Err(bad());
    }
    let hours = n
        .checked_mul(hours_per)
        .filter(|h| *h <= MAX_LIFETIME_HOURS)
        .ok_or_else(|| format!("{raw:?} is longer than ten years"))?;
    Ok(Lifetime {
        ms: hours * 3_600_000,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A usage error of any kind says the URLs it quotes without their
    /// password: an unexpected argument, an invalid value, as a separate
    /// word or after `=`, a password with a space in it. Clap's own text
    /// is left as it is.
    #[test]
    fn a_usage_error_never_shows_a_url_password() {
        let owned = |args: &[&str]| args.iter().map(ToString::to_string).collect::<Vec<_>>();
        for args in [
            &["zero-memory", "copy", "postgres://zm:S3cret@db/zm"][..],
            &[
                "zero-memory",
                "copy",
                "--to",
                "postgres://zm:S3cret@db/zm",
                "extra",
            ],
            &[
                "zero-memory",
                "user",
                "list",
                "postgres://zm:S3cret@db/zm?sslmode=require",
            ],
            &[
                "zero-memory",
                "serve",
                "--public-url=https://admin:S3cret@memory.example.com",
            ],
            &[
                "zero-memory",
                "migrate",
                "--database-url",
                "postgres://zm:S3 cret@",
            ],
            &[
                "zero-memory",
                "config",
                "check",
                "--max-sessions=postgres://zm:S3cret@db/zm",
            ],
        ] {
            let e = command().try_get_matches_from(args).unwrap_err();
            assert!(e.use_stderr(), "{args:?}: {e}");
            let raw = e.render().to_string();
            let text = redacted_error(&e, &owned(args));
            assert!(
                !text.contains("S3cret") && !text.contains("S3 cret"),
                "{args:?}: {text}"
            );
            if raw.contains("S3") {
                assert!(text.contains("***"), "{args:?}: {text}");
            }
        }
        // Nothing to hide: the text as clap renders it, its hint's
        // `postgres://USER:PASSWORD@…` included.
        for args in [
            &["zero-memory", "copy", "https://memory.example.com"][..],
            &["zero-memory", "migrate", "--database-url", "mysql://x"],
        ] {
            let e = command().try_get_matches_from(args).unwrap_err();
            assert_eq!(redacted_error(&e, &owned(args)), e.render().to_string());
        }
    }

    #[test]
    fn lifetimes() {
        let hour = 3_600_000;
        assert_eq!(parse_lifetime("12h").unwrap().ms, 12 * hour);
        assert_eq!(parse_lifetime("30d").unwrap().ms, 30 * 24 * hour);
        assert_eq!(parse_lifetime(" 90d ").unwrap().ms, 90 * 24 * hour);
        assert_eq!(parse_lifetime("2w").unwrap().ms, 14 * 24 * hour);
        for bad in [
            "", "d", "0d", "-1d", "1.5d", "90", "90m", "90 d", "100000w", "9é",
        ] {
            assert!(parse_lifetime(bad).is_err(), "{bad:?}");
        }
    }
}
