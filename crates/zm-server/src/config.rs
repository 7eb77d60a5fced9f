//! Configuration: every knob of the binary, resolved with the precedence
//! command-line flag > `ZM_*` environment variable > TOML file
//! (`--config PATH` / `ZM_CONFIG`) > built-in default.
//!
//! [`KNOBS`] is the one list of knobs (environment variable, flag, file key,
//! default, meaning); `config check` and the docs follow it. The flags
//! themselves are declared in [`ConfigArgs`] (clap reads the flag and the
//! environment variable; this module adds the file layer and the defaults
//! and remembers where every value came from).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args};

/// One configuration knob.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    /// The environment variable (`ZM_LISTEN`).
    pub env: &'static str,
    /// The command-line flag (`--listen`).
    pub flag: &'static str,
    /// The key in the TOML file, also the clap argument id (`listen`).
    pub key: &'static str,
    /// The default, as documented.
    pub default: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

/// Every knob, in the order `config check` and the docs list them.
pub const KNOBS: &[Knob] = &[
    Knob {
        env: "ZM_DATA_DIR",
        flag: "--data-dir",
        key: "data_dir",
        default: "$XDG_DATA_HOME/zero-memory, else ~/.local/share/zero-memory (Linux); ~/Library/Application Support/zero-memory (macOS); %APPDATA%\\zero-memory (Windows)",
        meaning: "Directory for the embedded SQLite database and other local state.",
    },
    Knob {
        env: "ZM_DATABASE_URL",
        flag: "--database-url",
        key: "database_url",
        default: "sqlite://<data_dir>/zero-memory.db",
        meaning: "The database: sqlite://PATH or postgres://USER:PASSWORD@HOST:PORT/DB.",
    },
    Knob {
        env: "ZM_LISTEN",
        flag: "--listen",
        key: "listen",
        default: "127.0.0.1:8787",
        meaning: "IP address and port the HTTP server listens on (`serve`).",
    },
    Knob {
        env: "ZM_PUBLIC_URL",
        flag: "--public-url",
        key: "public_url",
        default: "unset (http://<listen>)",
        meaning: "The external base URL clients reach the server at (behind a reverse proxy); its host is also allowed.",
    },
    Knob {
        env: "ZM_ALLOWED_HOSTS",
        flag: "--allowed-hosts",
        key: "allowed_hosts",
        default: "empty (loopback only)",
        meaning: "Comma-separated Host header values accepted besides loopback (DNS-rebinding protection).",
    },
    Knob {
        env: "ZM_ALLOWED_ORIGINS",
        flag: "--allowed-origins",
        key: "allowed_origins",
        default: "empty (Origin not checked)",
        meaning: "Comma-separated browser origins (scheme://host[:port]) accepted on /mcp.",
    },
    Knob {
        env: "ZM_CAPPED_CLIENTS",
        flag: "--capped-clients",
        key: "capped_clients",
        default: "claude-code",
        meaning: "Comma-separated MCP client names (clientInfo.name) whose instructions are capped at 2,000 characters; `none` for no client.",
    },
    Knob {
        env: "ZM_BODY_LIMIT_BYTES",
        flag: "--body-limit-bytes",
        key: "body_limit_bytes",
        default: "1048576",
        meaning: "Largest accepted HTTP request body, in bytes (1024..=1073741824).",
    },
    Knob {
        env: "ZM_TOKEN_RATE_LIMIT",
        flag: "--token-rate-limit",
        key: "token_rate_limit",
        default: "0 (off)",
        meaning: "Requests per minute allowed per access token; 0 or unset turns the limit off.",
    },
    Knob {
        env: "ZM_MAX_SESSIONS",
        flag: "--max-sessions",
        key: "max_sessions",
        default: "200",
        meaning: "MCP-over-HTTP sessions kept at most (1..=100000).",
    },
    Knob {
        env: "ZM_SESSION_IDLE_SECS",
        flag: "--session-idle-secs",
        key: "session_idle_secs",
        default: "1800",
        meaning: "Seconds after which an idle MCP-over-HTTP session ends (1..=604800).",
    },
    Knob {
        env: "ZM_OAUTH_RATELIMIT_MAX",
        flag: "--oauth-ratelimit-max",
        key: "oauth_ratelimit_max",
        default: "30",
        meaning: "Requests per client IP allowed on the OAuth endpoints per window (1..=100000).",
    },
    Knob {
        env: "ZM_OAUTH_RATELIMIT_WINDOW_S",
        flag: "--oauth-ratelimit-window-s",
        key: "oauth_ratelimit_window_s",
        default: "60",
        meaning: "Length of the OAuth rate-limit window, in seconds (1..=86400).",
    },
    Knob {
        env: "ZM_TRUST_PROXY",
        flag: "--trust-proxy",
        key: "trust_proxy",
        default: "false",
        meaning: "Trust X-Forwarded-For / X-Forwarded-Proto from a reverse proxy; requires an https ZM_PUBLIC_URL.",
    },
    Knob {
        env: "ZM_SQLITE_SYNCHRONOUS",
        flag: "--sqlite-synchronous",
        key: "sqlite_synchronous",
        default: "FULL",
        meaning: "SQLite `synchronous` pragma: FULL (no acknowledged write lost on power loss) or NORMAL (faster).",
    },
    Knob {
        env: "ZM_LOG",
        flag: "--log",
        key: "log",
        default: "info",
        meaning: "Log filter (tracing env-filter syntax, e.g. `info,zm_store=debug`). Logs always go to stderr.",
    },
    Knob {
        env: "ZM_LOG_FORMAT",
        flag: "--log-format",
        key: "log_format",
        default: "text",
        meaning: "Log format: text or json.",
    },
    Knob {
        env: "ZM_OWNER_EMAIL",
        flag: "--owner-email",
        key: "owner_email",
        default: "owner@localhost",
        meaning: "Email of the owner account `serve` creates on its first start (empty database).",
    },
    Knob {
        env: "ZM_TEST_ANONYMOUS_USER",
        flag: "--test-anonymous-user",
        key: "test_anonymous_user",
        default: "",
        meaning: "TEST ONLY, for the MCP conformance suite (which cannot send a token): /mcp requests without an Authorization header act as this existing user. Refused unless the listen address is loopback. Never set it in production.",
    },
];

/// The knob with this key.
pub fn knob(key: &str) -> &'static Knob {
    KNOBS
        .iter()
        .find(|k| k.key == key)
        .unwrap_or_else(|| panic!("unknown configuration knob {key}"))
}

/// The configuration flags, shared by every subcommand. Each flag also reads
/// its `ZM_*` environment variable; a flag wins over the variable, the
/// variable over the `--config` file, the file over the default.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Configuration (flag > ZM_* environment > --config file > default)")]
pub struct ConfigArgs {
    /// TOML configuration file; its keys are the flag names with `_` (e.g. `listen`, `data_dir`).
    #[arg(long = "config", env = "ZM_CONFIG", global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Data directory for the embedded SQLite database [default: $XDG_DATA_HOME/zero-memory, else
    /// ~/.local/share/zero-memory on Linux; ~/Library/Application Support/zero-memory on macOS;
    /// %APPDATA%\zero-memory on Windows].
    #[arg(long, env = "ZM_DATA_DIR", global = true, value_name = "DIR")]
    pub data_dir: Option<String>,

    /// Database URL: sqlite://PATH or postgres://USER:PASSWORD@HOST:PORT/DB
    /// [default: sqlite://<data-dir>/zero-memory.db].
    #[arg(
        long,
        env = "ZM_DATABASE_URL",
        global = true,
        value_name = "URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,

    /// Address the HTTP server listens on, IP:PORT [default: 127.0.0.1:8787].
    #[arg(long, env = "ZM_LISTEN", global = true, value_name = "ADDR")]
    pub listen: Option<String>,

    /// External base URL of the server (behind a reverse proxy), e.g. https://memory.example.com;
    /// its host is accepted too [default: unset, http://<listen>].
    #[arg(long, env = "ZM_PUBLIC_URL", global = true, value_name = "URL")]
    pub public_url: Option<String>,

    /// Comma-separated Host header values accepted besides loopback [default: none].
    #[arg(long, env = "ZM_ALLOWED_HOSTS", global = true, value_name = "HOSTS")]
    pub allowed_hosts: Option<String>,

    /// Comma-separated browser origins (scheme://host[:port]) accepted on /mcp [default: none,
    /// Origin not checked].
    #[arg(
        long,
        env = "ZM_ALLOWED_ORIGINS",
        global = true,
        value_name = "ORIGINS"
    )]
    pub allowed_origins: Option<String>,

    /// Comma-separated MCP client names whose instructions are capped at 2,000 characters;
    /// `none` for no client [default: claude-code].
    #[arg(long, env = "ZM_CAPPED_CLIENTS", global = true, value_name = "NAMES")]
    pub capped_clients: Option<String>,

    /// Largest accepted HTTP request body in bytes [default: 1048576].
    #[arg(long, env = "ZM_BODY_LIMIT_BYTES", global = true, value_name = "BYTES")]
    pub body_limit_bytes: Option<String>,

    /// Requests per minute per access token; 0 turns the limit off [default: 0, off].
    #[arg(long, env = "ZM_TOKEN_RATE_LIMIT", global = true, value_name = "N")]
    pub token_rate_limit: Option<String>,

    /// MCP-over-HTTP sessions kept at most [default: 200].
    #[arg(long, env = "ZM_MAX_SESSIONS", global = true, value_name = "N")]
    pub max_sessions: Option<String>,

    /// Seconds after which an idle MCP-over-HTTP session ends [default: 1800].
    #[arg(long, env = "ZM_SESSION_IDLE_SECS", global = true, value_name = "SECS")]
    pub session_idle_secs: Option<String>,

    /// Requests per client IP allowed on the OAuth endpoints per window [default: 30].
    #[arg(long, env = "ZM_OAUTH_RATELIMIT_MAX", global = true, value_name = "N")]
    pub oauth_ratelimit_max: Option<String>,

    /// Length of the OAuth rate-limit window in seconds [default: 60].
    #[arg(
        long,
        env = "ZM_OAUTH_RATELIMIT_WINDOW_S",
        global = true,
        value_name = "SECS"
    )]
    pub oauth_ratelimit_window_s: Option<String>,

    /// Trust X-Forwarded-* headers from a reverse proxy (requires an https --public-url);
    /// `--trust-proxy` alone means true [default: false].
    #[arg(
        long,
        env = "ZM_TRUST_PROXY",
        global = true,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub trust_proxy: Option<String>,

    /// SQLite synchronous mode: FULL or NORMAL [default: FULL].
    #[arg(
        long,
        env = "ZM_SQLITE_SYNCHRONOUS",
        global = true,
        value_name = "MODE"
    )]
    pub sqlite_synchronous: Option<String>,

    /// Log filter in tracing env-filter syntax; logs go to stderr [default: info].
    #[arg(long, env = "ZM_LOG", global = true, value_name = "FILTER")]
    pub log: Option<String>,

    /// Log format: text or json [default: text].
    #[arg(long, env = "ZM_LOG_FORMAT", global = true, value_name = "FORMAT")]
    pub log_format: Option<String>,

    /// Email of the owner account `serve` creates on first start [default: owner@localhost].
    #[arg(long, env = "ZM_OWNER_EMAIL", global = true, value_name = "EMAIL")]
    pub owner_email: Option<String>,

    /// TEST ONLY (MCP conformance suite): /mcp requests without a token act as
    /// this existing user; loopback listen addresses only.
    #[arg(
        long,
        env = "ZM_TEST_ANONYMOUS_USER",
        global = true,
        value_name = "EMAIL"
    )]
    pub test_anonymous_user: Option<String>,
}

impl ConfigArgs {
    fn raw(&self, key: &str) -> Option<&String> {
        match key {
            "data_dir" => self.data_dir.as_ref(),
            "database_url" => self.database_url.as_ref(),
            "listen" => self.listen.as_ref(),
            "public_url" => self.public_url.as_ref(),
            "allowed_hosts" => self.allowed_hosts.as_ref(),
            "allowed_origins" => self.allowed_origins.as_ref(),
            "capped_clients" => self.capped_clients.as_ref(),
            "body_limit_bytes" => self.body_limit_bytes.as_ref(),
            "token_rate_limit" => self.token_rate_limit.as_ref(),
            "max_sessions" => self.max_sessions.as_ref(),
            "session_idle_secs" => self.session_idle_secs.as_ref(),
            "oauth_ratelimit_max" => self.oauth_ratelimit_max.as_ref(),
            "oauth_ratelimit_window_s" => self.oauth_ratelimit_window_s.as_ref(),
            "trust_proxy" => self.trust_proxy.as_ref(),
            "sqlite_synchronous" => self.sqlite_synchronous.as_ref(),
            "log" => self.log.as_ref(),
            "log_format" => self.log_format.as_ref(),
            "owner_email" => self.owner_email.as_ref(),
            "test_anonymous_user" => self.test_anonymous_user.as_ref(),
            _ => None,
        }
    }

    /// The flag and environment layers, with where each value came from.
    /// `matches` are the parsed arguments (any level: the deepest
    /// subcommand's matches are used, where global flags end up).
    pub fn layer(&self, matches: &ArgMatches) -> CliLayer {
        let mut leaf = matches;
        while let Some((_, sub)) = leaf.subcommand() {
            leaf = sub;
        }
        let source_of = |id: &str| match leaf.value_source(id) {
            Some(ValueSource::CommandLine) => Source::Flag,
            _ => Source::Env,
        };
        let mut values = BTreeMap::new();
        for k in KNOBS {
            if let Some(v) = self.raw(k.key) {
                values.insert(k.key, (v.clone(), source_of(k.key)));
            }
        }
        CliLayer {
            values,
            config_file: self.config.clone().map(|p| (p, source_of("config"))),
        }
    }
}

/// The values given on the command line or in the environment.
#[derive(Debug, Clone, Default)]
pub struct CliLayer {
    /// knob key → (raw value, Flag or Env).
    pub values: BTreeMap<&'static str, (String, Source)>,
    /// The `--config` / `ZM_CONFIG` file, if any.
    pub config_file: Option<(PathBuf, Source)>,
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
}

/// The effective configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The TOML file that was read, if any.
    pub config_file: Option<PathBuf>,
    /// The data directory (absolute).
    pub data_dir: PathBuf,
    /// The database URL (may hold a password: print [`Config::database_url_redacted`]).
    pub database_url: String,
    /// Where the HTTP server listens.
    pub listen: SocketAddr,
    /// The external base URL, without a trailing slash.
    pub public_url: Option<String>,
    /// Host values accepted besides loopback (and the public URL's host).
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted on `/mcp` (empty: not checked).
    pub allowed_origins: Vec<String>,
    /// MCP clients whose instructions are capped.
    pub capped_clients: Vec<String>,
    /// Largest HTTP request body in bytes.
    pub body_limit_bytes: usize,
    /// Requests per minute per token; `None` = no limit.
    pub token_rate_limit: Option<u32>,
    /// MCP-over-HTTP sessions kept at most.
    pub max_sessions: usize,
    /// Idle seconds after which an MCP-over-HTTP session ends.
    pub session_idle_secs: u64,
    /// OAuth endpoint requests per IP per window.
    pub oauth_ratelimit_max: u32,
    /// OAuth rate-limit window in seconds.
    pub oauth_ratelimit_window_s: u64,
    /// Trust `X-Forwarded-*` headers.
    pub trust_proxy: bool,
    /// SQLite `synchronous`.
    pub sqlite_synchronous: SqliteSynchronous,
    /// The tracing env-filter.
    pub log: String,
    /// The log format.
    pub log_format: LogFormat,
    /// The owner account created on first start.
    pub owner_email: String,
    /// TEST ONLY: the email /mcp requests without a token act as.
    pub test_anonymous_user: Option<String>,
    /// knob key → where its value came from.
    pub sources: BTreeMap<&'static str, Source>,
}

/// The default data directory by OS convention.
pub fn default_data_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if cfg!(windows) {
        return var("APPDATA").map(|p| p.join("zero-memory"));
    }
    let home = var("HOME");
    if cfg!(target_os = "macos") {
        return home.map(|h| {
            h.join("Library")
                .join("Application Support")
                .join("zero-memory")
        });
    }
    if let Some(xdg) = var("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        return Some(xdg.join("zero-memory"));
    }
    home.map(|h| h.join(".local").join("share").join("zero-memory"))
}

fn split_list(raw: &str) -> Vec<String> {
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn parse_bool(raw: &str) -> Result<bool, String> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(format!("{raw:?} is not a boolean (use true or false)")),
    }
}

fn parse_num<T: std::str::FromStr>(raw: &str) -> Result<T, String> {
    raw.trim()
        .parse::<T>()
        .map_err(|_| format!("{raw:?} is not a non-negative whole number"))
}

/// A TOML value as the raw string the other layers give.
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
                    other => return Err(format!("list items must be strings, found {other}")),
                }
            }
            // An explicit empty list: nothing (for capped_clients, "none").
            if out.is_empty() {
                return Ok(",".into());
            }
            Ok(out.join(","))
        }
        other => Err(format!(
            "expected a string, a number, a boolean or a list of strings, found {other}"
        )),
    }
}

/// Read the TOML file into key → raw value.
fn read_file(path: &Path, errors: &mut Vec<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            errors.push(format!(
                "ZM_CONFIG: cannot read the configuration file {}: {e}",
                path.display()
            ));
            return out;
        }
    };
    let table: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => {
            errors.push(format!(
                "ZM_CONFIG: {} is not valid TOML: {}",
                path.display(),
                e.to_string().trim()
            ));
            return out;
        }
    };
    for (key, value) in &table {
        if !KNOBS.iter().any(|k| k.key == key) {
            let known: Vec<&str> = KNOBS.iter().map(|k| k.key).collect();
            errors.push(format!(
                "ZM_CONFIG: {}: unknown key `{key}` (known keys: {})",
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

impl Config {
    /// Resolve every knob from the layers and parse it. Errors name the
    /// knob and where its value came from; [`Config::validate`] checks the
    /// rest.
    pub fn resolve(cli: &CliLayer) -> Result<Config, Vec<String>> {
        let mut errors = Vec::new();
        let file_path = cli.config_file.as_ref().map(|(p, _)| p.clone());
        let file = match &file_path {
            Some(p) => read_file(p, &mut errors),
            None => BTreeMap::new(),
        };
        let mut sources = BTreeMap::new();
        // The winning raw value of a knob, if any layer set it.
        let mut pick = |key: &'static str| -> Option<(String, Source)> {
            let found = if let Some((v, s)) = cli.values.get(key) {
                Some((v.clone(), *s))
            } else {
                file.get(key).map(|v| (v.clone(), Source::File))
            };
            // An empty value is the same as none at all.
            let found = found.filter(|(v, _)| !v.trim().is_empty());
            sources.insert(key, found.as_ref().map_or(Source::Default, |(_, s)| *s));
            found
        };
        let fp = file_path.as_deref();
        let mut fail = |key: &'static str, source: Source, msg: String| {
            let k = knob(key);
            errors.push(format!(
                "{}: {msg} (from {})",
                k.env,
                source.describe(k, fp)
            ));
        };

        let data_dir = match pick("data_dir") {
            Some((v, _)) => PathBuf::from(v.trim()),
            None => match default_data_dir() {
                Some(d) => d,
                None => {
                    fail(
                        "data_dir",
                        Source::Default,
                        "cannot determine the default data directory (no HOME/APPDATA); set ZM_DATA_DIR or --data-dir".into(),
                    );
                    PathBuf::from("zero-memory-data")
                }
            },
        };
        let data_dir = std::path::absolute(&data_dir).unwrap_or(data_dir);
        let database_url = match pick("database_url") {
            Some((v, _)) => v.trim().to_string(),
            None => zm_store::sqlite_url(&data_dir.join("zero-memory.db")),
        };
        let listen = match pick("listen") {
            Some((v, s)) => match v.trim().parse::<SocketAddr>() {
                Ok(a) => a,
                Err(_) => {
                    fail(
                        "listen",
                        s,
                        format!(
                            "{v:?} is not an IP address with a port, like 127.0.0.1:8787 or [::1]:8787"
                        ),
                    );
                    default_listen()
                }
            },
            None => default_listen(),
        };
        let public_url =
            pick("public_url").map(|(v, _)| v.trim().trim_end_matches('/').to_string());
        let allowed_hosts = pick("allowed_hosts")
            .map(|(v, _)| split_list(&v))
            .unwrap_or_default();
        let allowed_origins = pick("allowed_origins")
            .map(|(v, _)| {
                split_list(&v)
                    .into_iter()
                    .map(|o| o.trim_end_matches('/').to_string())
                    .collect()
            })
            .unwrap_or_default();
        let capped_clients = match pick("capped_clients") {
            Some((v, _)) => {
                let list = split_list(&v);
                if list.len() == 1 && list[0].eq_ignore_ascii_case("none") {
                    Vec::new()
                } else {
                    list
                }
            }
            // `capped_clients = []` in the file arrives as ",": no client.
            None if file.get("capped_clients").is_some_and(|v| v.trim() == ",") => Vec::new(),
            None => vec!["claude-code".to_string()],
        };
        macro_rules! number {
            ($key:literal, $ty:ty, $default:expr) => {
                match pick($key) {
                    Some((v, s)) => match parse_num::<$ty>(&v) {
                        Ok(n) => n,
                        Err(e) => {
                            fail($key, s, e);
                            $default
                        }
                    },
                    None => $default,
                }
            };
        }
        let body_limit_bytes = number!("body_limit_bytes", usize, 1_048_576);
        let token_rate_limit = number!("token_rate_limit", u32, 0);
        let max_sessions = number!("max_sessions", usize, 200);
        let session_idle_secs = number!("session_idle_secs", u64, 1800);
        let oauth_ratelimit_max = number!("oauth_ratelimit_max", u32, 30);
        let oauth_ratelimit_window_s = number!("oauth_ratelimit_window_s", u64, 60);
        let trust_proxy = match pick("trust_proxy") {
            Some((v, s)) => parse_bool(&v).unwrap_or_else(|e| {
                fail("trust_proxy", s, e);
                false
            }),
            None => false,
        };
        let sqlite_synchronous = match pick("sqlite_synchronous") {
            Some((v, s)) => match v.trim().to_ascii_uppercase().as_str() {
                "FULL" => SqliteSynchronous::Full,
                "NORMAL" => SqliteSynchronous::Normal,
                _ => {
                    fail(
                        "sqlite_synchronous",
                        s,
                        format!("{v:?} is not FULL or NORMAL"),
                    );
                    SqliteSynchronous::Full
                }
            },
            None => SqliteSynchronous::Full,
        };
        let log = pick("log")
            .map(|(v, _)| v.trim().to_string())
            .unwrap_or_else(|| "info".into());
        let log_format = match pick("log_format") {
            Some((v, s)) => match v.trim().to_ascii_lowercase().as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                _ => {
                    fail("log_format", s, format!("{v:?} is not text or json"));
                    LogFormat::Text
                }
            },
            None => LogFormat::Text,
        };
        let owner_email = pick("owner_email")
            .map(|(v, _)| v.trim().to_string())
            .unwrap_or_else(|| "owner@localhost".into());
        let test_anonymous_user = pick("test_anonymous_user")
            .map(|(v, _)| v.trim().to_string())
            .filter(|v| !v.is_empty());

        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Config {
            config_file: file_path,
            data_dir,
            database_url,
            listen,
            public_url,
            allowed_hosts,
            allowed_origins,
            capped_clients,
            body_limit_bytes,
            token_rate_limit: (token_rate_limit > 0).then_some(token_rate_limit),
            max_sessions,
            session_idle_secs,
            oauth_ratelimit_max,
            oauth_ratelimit_window_s,
            trust_proxy,
            sqlite_synchronous,
            log,
            log_format,
            owner_email,
            test_anonymous_user,
            sources,
        })
    }

    /// Resolve and validate.
    pub fn load(cli: &CliLayer) -> Result<Config, Vec<String>> {
        let cfg = Config::resolve(cli)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Every default, with the data directory given (for tests and tools).
    pub fn defaults_in(data_dir: impl Into<PathBuf>) -> Config {
        let mut layer = CliLayer::default();
        let dir: PathBuf = data_dir.into();
        layer
            .values
            .insert("data_dir", (dir.display().to_string(), Source::Flag));
        Config::resolve(&layer).expect("the defaults are valid")
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

    /// Check every value: URL schemes, ranges, combinations.
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut errors = Vec::new();
        if self.data_dir.as_os_str().is_empty() {
            errors.push(self.err("data_dir", "must not be empty"));
        }
        if let Err(e) = check_database_url(&self.database_url) {
            errors.push(self.err("database_url", e));
        }
        if let Some(p) = &self.public_url {
            match url::Url::parse(p) {
                Ok(u) => {
                    if u.scheme() != "http" && u.scheme() != "https" {
                        errors.push(self.err(
                            "public_url",
                            format!("{p:?} must start with https:// or http://"),
                        ));
                    } else if u.host_str().is_none_or(str::is_empty) {
                        errors.push(self.err("public_url", format!("{p:?} has no host")));
                    } else if u.query().is_some() || u.fragment().is_some() {
                        errors.push(self.err(
                            "public_url",
                            format!("{p:?} must not have a query or fragment"),
                        ));
                    } else if !u.username().is_empty() || u.password().is_some() {
                        errors.push(
                            self.err("public_url", format!("{p:?} must not carry credentials")),
                        );
                    }
                }
                Err(e) => errors.push(self.err("public_url", format!("{p:?} is not a URL: {e}"))),
            }
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
        for h in &self.allowed_hosts {
            if h.contains("://")
                || h.contains('/')
                || h.contains(char::is_whitespace)
                || h.contains('@')
            {
                errors.push(self.err(
                    "allowed_hosts",
                    format!(
                        "{h:?} is not a host (write host or host:port, without scheme or path)"
                    ),
                ));
            }
        }
        for o in &self.allowed_origins {
            let ok = url::Url::parse(o).is_ok_and(|u| {
                (u.scheme() == "http" || u.scheme() == "https")
                    && u.host_str().is_some_and(|h| !h.is_empty())
                    && u.path() == "/"
                    && u.query().is_none()
                    && u.fragment().is_none()
                    && u.username().is_empty()
            });
            if !ok {
                errors.push(self.err(
                    "allowed_origins",
                    format!("{o:?} is not an origin (write scheme://host[:port], e.g. https://app.example.com)"),
                ));
            }
        }
        let ranges: [(&'static str, u64, u64, u64); 6] = [
            (
                "body_limit_bytes",
                self.body_limit_bytes as u64,
                1024,
                1 << 30,
            ),
            (
                "token_rate_limit",
                u64::from(self.token_rate_limit.unwrap_or(0)),
                0,
                1_000_000,
            ),
            ("max_sessions", self.max_sessions as u64, 1, 100_000),
            ("session_idle_secs", self.session_idle_secs, 1, 604_800),
            (
                "oauth_ratelimit_max",
                u64::from(self.oauth_ratelimit_max),
                1,
                100_000,
            ),
            (
                "oauth_ratelimit_window_s",
                self.oauth_ratelimit_window_s,
                1,
                86_400,
            ),
        ];
        for (key, value, min, max) in ranges {
            if value < min || value > max {
                errors.push(self.err(key, format!("{value} is out of range ({min}..={max})")));
            }
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log) {
            errors.push(self.err(
                "log",
                format!("{:?} is not a valid log filter: {e}", self.log),
            ));
        }
        let e = &self.owner_email;
        if e.len() < 3 || e.len() > 320 || !e.contains('@') || e.contains(char::is_whitespace) {
            errors.push(self.err("owner_email", format!("{e:?} is not an email address")));
        }
        if self.test_anonymous_user.is_some() && !self.listen.ip().is_loopback() {
            errors.push(self.err(
                "test_anonymous_user",
                format!(
                    "is test-only and needs a loopback listen address, not {}",
                    self.listen
                ),
            ));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The database URL with any password replaced by `***`.
    pub fn database_url_redacted(&self) -> String {
        redact_url(&self.database_url)
    }

    /// Is the database SQLite?
    pub fn is_sqlite(&self) -> bool {
        self.database_url.starts_with("sqlite:")
    }

    /// How to open the store. A SQLite URL without `mode=` gets
    /// `mode=rwc` so the file is created on first use.
    pub fn open_options(&self) -> zm_store::OpenOptions {
        let mut url = self.database_url.clone();
        if self.is_sqlite() && !url.contains("mode=") {
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str("mode=rwc");
        }
        let mut opts = zm_store::OpenOptions::new(url);
        opts.sqlite_synchronous = self.sqlite_synchronous.as_str().into();
        opts
    }

    /// The MCP settings.
    pub fn mcp_config(&self) -> zm_mcp::McpConfig {
        zm_mcp::McpConfig {
            capped_clients: self.capped_clients.clone(),
        }
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
        let list = |v: &[String]| {
            if v.is_empty() {
                "(none)".to_string()
            } else {
                v.join(",")
            }
        };
        KNOBS
            .iter()
            .map(|k| {
                let value = match k.key {
                    "data_dir" => self.data_dir.display().to_string(),
                    "database_url" => self.database_url_redacted(),
                    "listen" => self.listen.to_string(),
                    "public_url" => self.public_url.clone().unwrap_or_else(|| "(unset)".into()),
                    "allowed_hosts" => list(&self.allowed_hosts),
                    "allowed_origins" => list(&self.allowed_origins),
                    "capped_clients" => list(&self.capped_clients),
                    "body_limit_bytes" => self.body_limit_bytes.to_string(),
                    "token_rate_limit" => match self.token_rate_limit {
                        Some(n) => n.to_string(),
                        None => "0 (off)".into(),
                    },
                    "max_sessions" => self.max_sessions.to_string(),
                    "session_idle_secs" => self.session_idle_secs.to_string(),
                    "oauth_ratelimit_max" => self.oauth_ratelimit_max.to_string(),
                    "oauth_ratelimit_window_s" => self.oauth_ratelimit_window_s.to_string(),
                    "trust_proxy" => self.trust_proxy.to_string(),
                    "sqlite_synchronous" => self.sqlite_synchronous.as_str().into(),
                    "log" => self.log.clone(),
                    "log_format" => self.log_format.as_str().into(),
                    "owner_email" => self.owner_email.clone(),
                    "test_anonymous_user" => self.test_anonymous_user.clone().unwrap_or_default(),
                    _ => String::new(),
                };
                let source = self.source(k.key);
                let mut from = source.describe(k, self.config_file.as_deref());
                if source == Source::Default && k.key == "database_url" {
                    from = "default (from the data directory)".into();
                }
                (k, value, from)
            })
            .collect()
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 8787))
}

fn check_database_url(raw: &str) -> Result<(), String> {
    if let Some(rest) = raw.strip_prefix("sqlite:") {
        let path = rest
            .trim_start_matches("//")
            .split('?')
            .next()
            .unwrap_or("");
        if path.is_empty() || path == ":memory:" {
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
            Ok(_) => Err(format!("{:?} has no host", redact_url(raw))),
            Err(e) => Err(format!("{:?} is not a URL: {e}", redact_url(raw))),
        };
    }
    Err(format!(
        "{:?} is not supported: use sqlite://PATH or postgres://USER:PASSWORD@HOST:PORT/DB",
        redact_url(raw)
    ))
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
            let secret =
                k.eq_ignore_ascii_case("password") || k.eq_ignore_ascii_case("sslpassword");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(values: &[(&'static str, &str)]) -> CliLayer {
        let mut l = CliLayer::default();
        for (k, v) in values {
            l.values.insert(k, (v.to_string(), Source::Env));
        }
        l
    }

    #[test]
    fn defaults() {
        let cfg = Config::load(&layer(&[("data_dir", "/tmp/zm-test")])).unwrap();
        assert_eq!(cfg.listen.to_string(), "127.0.0.1:8787");
        assert_eq!(
            cfg.database_url,
            "sqlite:///tmp/zm-test/zero-memory.db?mode=rwc"
        );
        assert_eq!(cfg.capped_clients, vec!["claude-code"]);
        assert_eq!(cfg.body_limit_bytes, 1_048_576);
        assert_eq!(cfg.token_rate_limit, None);
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
            "listen = \"0.0.0.0:9000\"\nmax_sessions = 7\ncapped_clients = []\nallowed_hosts = [\"a.example\", \"b.example:8443\"]\ntrust_proxy = true\npublic_url = \"https://memory.example.com/\"\n",
        )
        .unwrap();
        let mut l = layer(&[("data_dir", "/tmp/x"), ("max_sessions", "9")]);
        l.config_file = Some((path.clone(), Source::Flag));
        let cfg = Config::load(&l).unwrap();
        assert_eq!(cfg.listen.to_string(), "0.0.0.0:9000");
        assert_eq!(cfg.sources["listen"], Source::File);
        assert_eq!(cfg.max_sessions, 9, "env beats file");
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

    #[test]
    fn unknown_file_key_and_bad_values_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zm.toml");
        std::fs::write(&path, "lisen = \"x\"\n").unwrap();
        let mut l = layer(&[
            ("data_dir", "/tmp/x"),
            ("listen", "nope"),
            ("max_sessions", "-1"),
        ]);
        l.config_file = Some((path, Source::Env));
        let errs = Config::load(&l).unwrap_err();
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
        let errs = Config::load(&layer(&[
            ("data_dir", "/tmp/x"),
            ("trust_proxy", "yes"),
            ("public_url", "http://memory.example.com"),
            ("database_url", "mysql://x"),
            ("allowed_origins", "https://ok.example,not an origin"),
            ("body_limit_bytes", "10"),
            ("log", "info,[[["),
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
        let cfg = Config::load(&layer(&[
            ("data_dir", "/tmp/x"),
            ("database_url", "postgres://u:pw@h/db"),
        ]))
        .unwrap();
        let shown = cfg
            .report()
            .into_iter()
            .find(|(k, _, _)| k.key == "database_url")
            .unwrap();
        assert!(!shown.1.contains("pw@"), "{shown:?}");
    }

    #[test]
    fn sqlite_url_gets_create_mode() {
        let cfg = Config::load(&layer(&[
            ("data_dir", "/tmp/x"),
            ("database_url", "sqlite:///tmp/x/other.db"),
        ]))
        .unwrap();
        assert_eq!(cfg.open_options().url, "sqlite:///tmp/x/other.db?mode=rwc");
        assert_eq!(cfg.open_options().sqlite_synchronous, "FULL");
    }

    #[test]
    fn the_configuration_doc_lists_every_knob() {
        let doc = include_str!("../../../docs/CONFIGURATION.md");
        for k in KNOBS {
            let row = format!("| `{}` | `{}", k.env, k.flag);
            assert!(doc.contains(&row), "docs/CONFIGURATION.md lacks {row}");
            assert!(
                doc.contains(&format!("| `{}` |", k.key)),
                "no file key {}",
                k.key
            );
        }
    }

    #[test]
    fn every_knob_has_a_flag_in_the_cli() {
        use clap::CommandFactory;
        let cmd = crate::cli::Cli::command();
        for k in KNOBS {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_id() == k.key)
                .unwrap_or_else(|| panic!("no flag for {}", k.key));
            assert_eq!(format!("--{}", arg.get_long().unwrap()), k.flag);
            assert_eq!(arg.get_env().unwrap().to_str().unwrap(), k.env);
        }
    }
}
