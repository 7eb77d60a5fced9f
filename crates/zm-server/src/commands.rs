//! The subcommands (all but the HTTP server itself, which is `serve.rs`).

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use zm_contracts::{ExportMemoriesInput, ToolError};
use zm_mcp::{Identity, ZeroMemoryMcp};
use zm_store::clock::rfc3339;
use zm_store::identity::SCOPE_ACCOUNT_DELETE;
use zm_store::identity::random_secret;
use zm_store::{Caller, SCOPE_READ, SCOPE_WRITE, Store, ToolService, User};

use crate::cli::{
    Command, ConfigCommand, ExportArgs, Lifetime, OauthCommand, StdioArgs, TokenCommand,
    UserCommand,
};
use crate::config::{Config, Inputs, LogFormat};

/// Length of a generated password (62 symbols: about 143 bits).
const GENERATED_PASSWORD_LEN: usize = 24;

/// Run one command; errors are printed here.
pub async fn run(command: Command, inputs: Inputs) -> ExitCode {
    if let Command::Config(ConfigCommand::Check(_)) = command {
        return config_check(&inputs);
    }
    let cfg = match Config::load(&inputs) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("zero-memory: invalid configuration:");
            for e in errors {
                eprintln!("  {e}");
            }
            eprintln!("(`zero-memory config check` shows the effective configuration)");
            return ExitCode::from(1);
        }
    };
    init_logging(&cfg);
    for note in crate::config::unknown_env_notes()
        .into_iter()
        .chain(cfg.config_file_note())
        .chain(cfg.ignored_data_dir_note())
    {
        tracing::warn!(target: OPERATOR, "{note}");
    }
    match dispatch(command, &cfg).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<StdoutClosed>().is_some() => ExitCode::SUCCESS,
        Err(e) => {
            match cfg.log_format {
                LogFormat::Text => eprintln!("zero-memory: error: {e:#}"),
                LogFormat::Json => {
                    tracing::error!(target: OPERATOR, error = format!("{e:#}"), "zero-memory failed");
                }
            }
            ExitCode::from(1)
        }
    }
}

/// The target of the events that stand for what text mode prints to the
/// operator whatever the log filter (the start banner, notices, a fatal
/// error): with `--log-format json` it is always enabled, at `info`.
pub const OPERATOR: &str = "zero_memory";

/// A line `serve` has for the operator on stderr (the first start, a
/// missing password, test mode): as it is in text, as one `warn` event
/// with `--log-format json` (target [`OPERATOR`], shown whatever the
/// filter), so that every line on stderr is one JSON object for whatever
/// collects them.
pub fn tell_operator(cfg: &Config, text: &str) {
    match cfg.log_format {
        LogFormat::Text => eprintln!("{}", text.trim_end()),
        LogFormat::Json => tracing::warn!(target: OPERATOR, "{}", text.trim_end()),
    }
}

async fn dispatch(command: Command, cfg: &Config) -> anyhow::Result<()> {
    match command {
        Command::Serve(_) => serve(cfg).await,
        Command::Stdio(args) => stdio(cfg, args).await,
        Command::Migrate => migrate(cfg).await,
        Command::Reindex(args) => reindex(cfg, args.all).await,
        Command::User(UserCommand::Add {
            email,
            password_stdin,
        }) => user_add(cfg, &email, password_stdin).await,
        Command::User(UserCommand::List) => user_list(cfg).await,
        Command::User(UserCommand::Passwd {
            email,
            password_stdin,
            revoke_tokens,
        }) => user_passwd(cfg, &email, password_stdin, revoke_tokens).await,
        Command::User(UserCommand::Disable { email }) => user_disable(cfg, &email).await,
        Command::User(UserCommand::Enable { email }) => user_enable(cfg, &email).await,
        Command::User(UserCommand::Owner { email }) => user_owner(cfg, &email).await,
        Command::Token(TokenCommand::Create {
            user,
            name,
            read_only,
            allow_account_delete,
            expires,
        }) => {
            token_create(
                cfg,
                &user,
                name.as_deref(),
                read_only,
                allow_account_delete,
                expires,
            )
            .await
        }
        Command::Token(TokenCommand::List { user }) => token_list(cfg, &user).await,
        Command::Token(TokenCommand::Revoke { user, token_id }) => {
            token_revoke(cfg, &user, &token_id).await
        }
        Command::Oauth(OauthCommand::Clients { user }) => oauth_clients(cfg, &user).await,
        Command::Oauth(OauthCommand::Revoke { user, client_id }) => {
            oauth_revoke(cfg, &user, &client_id).await
        }
        Command::Team(command) => crate::team::run(cfg, command).await,
        Command::Copy(args) => copy(cfg, &args.to).await,
        Command::Export(args) => export(cfg, &args).await,
        Command::Import(args) => crate::import::run(cfg, &args).await,
        Command::Config(ConfigCommand::Check(_)) => unreachable!("handled before loading"),
    }
}

/// The log filter: the configured one, except that the MCP library's
/// `info` lines (rmcp dumps the client's capabilities on every connect, and
/// notes every session start and end) count as `debug`: when the filter's
/// default level is `info`, `rmcp=warn` is added — unless the filter names
/// `rmcp` itself.
pub fn log_filter(configured: &str) -> String {
    use tracing_subscriber::filter::LevelFilter;
    if configured.contains("rmcp") {
        return configured.to_string();
    }
    // The default level: the last directive that is a bare level.
    let default = configured
        .split(',')
        .map(str::trim)
        .filter_map(|d| d.parse::<LevelFilter>().ok())
        .next_back();
    if default == Some(LevelFilter::INFO) {
        format!("{configured},rmcp=warn")
    } else {
        configured.to_string()
    }
}

/// Logs go to stderr, always (stdout is command output or the MCP protocol).
/// With `--log-format json` the [`OPERATOR`] events are always on, and a
/// panic is an `error` event instead of the default hook's plain text.
fn init_logging(cfg: &Config) {
    let mut directives = log_filter(&cfg.log);
    if cfg.log_format == LogFormat::Json {
        directives.push_str(&format!(",{OPERATOR}=info"));
        std::panic::set_hook(Box::new(|info| {
            tracing::error!(target: OPERATOR, panic = %info, "zero-memory panicked");
        }));
    }
    let filter = tracing_subscriber::EnvFilter::try_new(directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match cfg.log_format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// A tool error as one line (with the offending fields, if any).
pub fn describe(e: &ToolError) -> String {
    let mut s = e.message.clone();
    if let Some(fields) = e
        .details
        .as_ref()
        .and_then(|d| d.get("fields"))
        .and_then(|f| f.as_array())
    {
        let parts: Vec<String> = fields
            .iter()
            .map(|f| {
                format!(
                    "{}: {}",
                    f["path"].as_str().unwrap_or("?"),
                    f["reason"].as_str().unwrap_or("?")
                )
            })
            .collect();
        if !parts.is_empty() {
            s.push_str(&format!(" ({})", parts.join("; ")));
        }
    }
    s
}

#[allow(clippy::needless_pass_by_value, reason = "used as `.map_err(tool)`")]
pub(crate) fn tool(e: ToolError) -> anyhow::Error {
    anyhow!("{}", describe(&e))
}

/// Open the configured database, which must exist and be migrated: a
/// command pointed at the wrong data directory fails here instead of
/// working on a new, empty database (and, for `user list`, reporting no
/// users), and one run with a newer build asks for `migrate` first.
pub async fn open_store(cfg: &Config) -> anyhow::Result<Store> {
    if let Some(db) = zm_store::sqlite_path(&cfg.open_options().url)
        && !db.exists()
    {
        bail!(
            "no database at {} (is this the server's data directory? set --data-dir, ZM_DATA_DIR or ZM_DATABASE_URL as the server has them; `zero-memory serve` or `zero-memory migrate` creates a new one)",
            db.display()
        );
    }
    // The schema is moved by `serve`, `stdio` and `migrate` only: a list
    // run with a new build does not migrate the database under a running
    // server of the previous one.
    let mut opts = cfg.open_options();
    opts.migrate = false;
    open_store_with(cfg, opts).await
}

/// Open (and migrate) the configured database, creating it when there is
/// none: the commands that start a server or an account (`serve`,
/// `stdio`, `migrate`, `user add`). A SQLite database is created private
/// (see [`crate::files`]).
pub async fn create_store(cfg: &Config) -> anyhow::Result<Store> {
    open_store_with(cfg, cfg.open_options()).await
}

/// [`create_store`] for `stdio`: one client per process, and a machine may
/// run one such process per agent, so each keeps a small footprint — a
/// few connections and no memory-mapped reads (mapped pages would count in
/// every process's resident memory).
async fn open_local_store(cfg: &Config) -> anyhow::Result<Store> {
    let mut opts = cfg.open_options();
    opts.max_connections = 4;
    opts.sqlite_mmap_bytes = 0;
    open_store_with(cfg, opts).await
}

async fn open_store_with(cfg: &Config, opts: zm_store::OpenOptions) -> anyhow::Result<Store> {
    crate::files::prepare_database(cfg).with_context(|| {
        format!(
            "cannot prepare the database {}",
            cfg.database_url_redacted()
        )
    })?;
    Store::open_with(opts)
        .await
        .with_context(|| format!("cannot open the database {}", cfg.database_url_redacted()))
}

/// Refuse a disabled account.
pub(crate) fn usable(user: User) -> anyhow::Result<User> {
    if user.is_disabled() {
        bail!(
            "the account {} is disabled (`zero-memory user enable {}` enables it)",
            user.email,
            user.email
        );
    }
    Ok(user)
}

/// The user with this email, or a clear error.
pub async fn find_user(store: &Store, email: &str) -> anyhow::Result<User> {
    store
        .user_by_email(email)
        .await
        .map_err(tool)?
        .ok_or_else(|| {
            anyhow!("no user {email:?} in this database (`zero-memory user list` shows the users)")
        })
}

/// A password from stdin (`--password-stdin`: the first line, without its
/// line ending), or a generated one.
fn password_from(password_stdin: bool) -> anyhow::Result<(String, bool)> {
    if !password_stdin {
        return Ok((random_secret(GENERATED_PASSWORD_LEN), true));
    }
    // The first line only: typed at a terminal, Enter ends it (reading to
    // the end would wait for Ctrl-D).
    let raw = read_secret_line().context("cannot read the password from stdin")?;
    let line = raw.trim_end_matches(['\n', '\r']).to_string();
    if line.is_empty() {
        bail!("--password-stdin: stdin holds no password");
    }
    Ok((line, false))
}

/// One line of stdin. At a terminal it is not shown as it is typed: the
/// terminal is read a key at a time, without echo and without the keys
/// that signal (Ctrl-C, Ctrl-Z, Ctrl-\\), after a `Password: ` prompt on
/// stderr (Backspace and Ctrl-U edit the line; Enter ends it, Ctrl-D on
/// an empty line too). The terminal is put back as it was, whatever
/// happens, before a Ctrl-C is passed on as the interrupt it stands for
/// to the terminal's foreground processes (as the terminal itself would):
/// otherwise the terminal would stay silent after the command.
fn read_secret_line() -> std::io::Result<String> {
    let stdin = std::io::stdin();
    let mut raw = String::new();
    #[cfg(unix)]
    if std::io::IsTerminal::is_terminal(&stdin) {
        use rustix::termios::{
            LocalModes, OptionalActions, SpecialCodeIndex, tcgetattr, tcsetattr,
        };
        /// The terminal's settings, put back when dropped.
        struct Restore<'a>(&'a std::io::Stdin, rustix::termios::Termios);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                let _ = tcsetattr(self.0, OptionalActions::Now, &self.1);
            }
        }
        let shown = tcgetattr(&stdin)?;
        let mut hidden = shown.clone();
        hidden
            .local_modes
            .remove(LocalModes::ECHO | LocalModes::ICANON | LocalModes::ISIG | LocalModes::IEXTEN);
        hidden.special_codes[SpecialCodeIndex::VMIN] = 1;
        hidden.special_codes[SpecialCodeIndex::VTIME] = 0;
        let restore = Restore(&stdin, shown);
        // Drain, not flush: what was typed (or pasted) before the prompt
        // stays to be read.
        tcsetattr(&stdin, OptionalActions::Drain, &hidden)?;
        let mut err = std::io::stderr();
        let _ = write!(err, "Password: ");
        let _ = err.flush();
        let typed = read_keys(&mut stdin.lock());
        drop(restore);
        // The Enter, not echoed, still ends the prompt's line.
        let _ = writeln!(err);
        return match typed? {
            Keys::Line(line) => Ok(line),
            Keys::Interrupted => {
                use rustix::process::{Signal, kill_current_process_group, kill_process_group};
                let foreground = rustix::termios::tcgetpgrp(&stdin);
                let _ = match foreground {
                    Ok(group) => kill_process_group(group, Signal::INT),
                    Err(_) => kill_current_process_group(Signal::INT),
                };
                // Only if the interrupt was caught rather than ending us.
                std::process::exit(130)
            }
        };
    }
    stdin.lock().read_line(&mut raw)?;
    Ok(raw)
}

/// What a terminal read a key at a time gave.
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(not(unix), allow(dead_code))]
enum Keys {
    Line(String),
    Interrupted,
}

/// A line typed at a terminal in raw mode, a key at a time: Enter ends
/// it (as does the end of input, and Ctrl-D on an empty line), Backspace
/// takes back a character, Ctrl-U the whole line, Ctrl-C interrupts; any
/// other control key, and the escape sequence of an arrow or function
/// key, is left out (it would be a character nobody can type again in a
/// browser's password field); any other byte is the line's.
#[cfg_attr(not(unix), allow(dead_code))]
fn read_keys(input: &mut impl std::io::Read) -> std::io::Result<Keys> {
    const INTERRUPT: u8 = 0x03;
    const END: u8 = 0x04;
    const KILL_LINE: u8 = 0x15;
    const ESCAPE: u8 = 0x1b;
    let mut line: Vec<u8> = Vec::new();
    let mut key = [0u8; 1];
    // Inside an escape sequence: `ESC`, then `[` or `O`, then parameters
    // up to a final byte (`@` to `~`).
    let mut escape = 0u8;
    loop {
        if input.read(&mut key)? == 0 {
            break;
        }
        let b = key[0];
        if escape > 0 {
            let opening = escape == 1 && (b == b'[' || b == b'O');
            escape = if opening || !(0x40..=0x7e).contains(&b) {
                2
            } else {
                0
            };
            continue;
        }
        match b {
            b'\r' | b'\n' => break,
            INTERRUPT => return Ok(Keys::Interrupted),
            END if line.is_empty() => break,
            KILL_LINE => line.clear(),
            ESCAPE => escape = 1,
            // Backspace (DEL or ^H): the last character, all its bytes.
            0x7f | 0x08 => {
                while let Some(b) = line.pop() {
                    if b & 0xC0 != 0x80 {
                        break;
                    }
                }
            }
            b if b < 0x20 => {}
            b => line.push(b),
        }
    }
    String::from_utf8(line).map(Keys::Line).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "the password is not UTF-8")
    })
}

// ------------------------------------------------------------------ serve

async fn serve(cfg: &Config) -> anyhow::Result<()> {
    let (listener, cfg) = crate::serve::bind(cfg).await?;
    let store = create_store(&cfg).await?;
    crate::bootstrap::on_serve_start(&store, &cfg).await?;
    crate::serve::run(&cfg, store, listener).await
}

// ------------------------------------------------------------------ stdio

/// What to attach a stdio session to: `--project`, else the working
/// directory's `origin` remote, else its git root, else the directory.
pub fn project_hint(explicit: Option<&str>, cwd: &Path) -> Option<String> {
    if let Some(p) = explicit.map(str::trim).filter(|p| !p.is_empty()) {
        return Some(p.to_string());
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(cwd)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (!s.is_empty()).then_some(s)
    };
    git(&["remote", "get-url", "origin"])
        .or_else(|| git(&["rev-parse", "--show-toplevel"]))
        .or_else(|| Some(cwd.display().to_string()))
}

/// The account `stdio` acts as without `--user`: the owner; on a database
/// without any user, a new owner (`owner_email`) without a password —
/// stdio is local and needs none. `true` when it was created now.
async fn stdio_owner(store: &Store, cfg: &Config) -> anyhow::Result<(User, bool)> {
    if let Some(owner) = store.owner().await.map_err(tool)? {
        return Ok((owner, false));
    }
    match store.create_local_owner(&cfg.owner_email).await {
        Ok(Some(owner)) => return Ok((owner, true)),
        // A user exists (another process was first, or the owner deleted
        // their account): use the owner if there is one.
        Ok(None) => {}
        Err(e) => return Err(tool(e)),
    }
    let owner = store.owner().await.map_err(tool)?.ok_or_else(|| {
        anyhow!("this database has users but no owner account: pass --user EMAIL (`zero-memory user list` shows the users)")
    })?;
    Ok((owner, false))
}

async fn stdio(cfg: &Config, args: StdioArgs) -> anyhow::Result<()> {
    let store = open_local_store(cfg).await?;
    let (user, created) = match &args.user {
        Some(email) => (find_user(&store, email).await?, false),
        None => stdio_owner(&store, cfg).await?,
    };
    let user = usable(user)?;
    // The working directory is read only when it names the project: a
    // client that starts the server from a directory since removed (a
    // deleted worktree) with `--project` or `--no-project` is served.
    let hint = match args.project.as_deref().map(str::trim) {
        _ if args.no_project => None,
        Some(p) if !p.is_empty() => Some(p.to_string()),
        _ => match std::env::current_dir() {
            Ok(cwd) => project_hint(None, &cwd),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the working directory: no project attached (pass --project, or project_hint on the first call)");
                None
            }
        },
    };
    let attached = match &hint {
        Some(h) => store
            .resolve_hint(&Caller::new(user.id.clone()), h)
            .await
            .map_err(tool)?,
        None => None,
    };
    // One line on a normal start and close: stdio's stderr is often shown
    // to the user by the client.
    let project = attached.as_deref().unwrap_or("-");
    if created {
        tracing::info!(
            user = %user.email,
            project,
            "serving MCP on stdio; the database had no user, so this created the owner account {} without a password (stdio needs none; `zero-memory user passwd {}` sets one for signing in over HTTP)",
            user.email,
            user.email
        );
    } else {
        tracing::info!(user = %user.email, project, "serving MCP on stdio");
    }
    let server = ZeroMemoryMcp::new(
        ToolService::new(store.clone()),
        Arc::new(cfg.mcp_config()),
        Identity::User(user.id.clone()),
    )
    .with_attached_project(attached);
    let cancel = tokio_util::sync::CancellationToken::new();
    crate::serve::spawn_usage_flush(store.clone(), cancel.clone());
    let embedder = crate::embedder::spawn(store.clone(), cfg, cancel.clone());
    // A client that stops its server with SIGTERM (or a Ctrl-C in a
    // terminal) gets the same clean close as one that closes stdin: the
    // recall counts written, the embedder's claims released, the database
    // closed (a call still running when the pool closes fails, and its
    // transaction rolls back).
    let result = tokio::select! {
        r = zm_mcp::serve_stdio(server) => r,
        () = crate::serve::shutdown_signal() => Ok(()),
    };
    cancel.cancel();
    crate::serve::wind_down(&store, embedder).await;
    result.map_err(|e| anyhow!("MCP over stdio failed: {e}"))
}

// ------------------------------------------------------------------ migrate

async fn migrate(cfg: &Config) -> anyhow::Result<()> {
    let store = create_store(cfg).await?;
    store.close().await;
    say(format!(
        "{}: schema version {}",
        cfg.database_url_redacted(),
        zm_store::db::latest_schema_version()
    ))
}

// --------------------------------------------------------------------- copy

async fn copy(cfg: &Config, to: &str) -> anyhow::Result<()> {
    let to = &crate::config::database_url_at_home(to.trim()).map_err(|e| anyhow!("--to: {e}"))?;
    let shown = crate::config::redact_url(to);
    crate::config::check_database_url(to).map_err(|e| anyhow!("--to: {e}"))?;
    // A SQLite destination is created (private, as the server's own).
    let url = crate::config::creating(to);
    // A source that is not there is a mistyped path, not an empty store:
    // opening it would create it and copy nothing, reporting success.
    if let Some(path) = zm_store::db::sqlite_path(&cfg.database_url())
        && !path.exists()
    {
        bail!(
            "the source database {} does not exist: nothing to copy (check --data-dir or --database-url)",
            path.display()
        );
    }
    // The source is opened before the destination is prepared (which
    // creates a SQLite file): a source that cannot be opened (one that
    // needs `migrate`, a file that is no database) leaves no empty
    // destination file behind.
    let store = open_store(cfg).await?;
    if let Err(e) = crate::files::prepare_database_url(&url) {
        store.close().await;
        return Err(e).with_context(|| format!("cannot prepare the database {shown}"));
    }
    let mut opts = zm_store::OpenOptions::new(url);
    opts.max_connections = 2;
    let report = store
        .copy_into(&opts)
        .await
        .with_context(|| format!("cannot copy {} into {shown}", cfg.database_url_redacted()))?;
    store.close().await;
    // The copy is made: a reader gone early does not hide the note below.
    let listed = report
        .tables
        .iter()
        .try_for_each(|(table, rows)| say(format!("{table}\t{rows}")));
    eprintln!(
        "copied {} memories of {} users from {} into {shown}; point ZM_DATABASE_URL at it to serve from it",
        report.rows("memories"),
        report.rows("users"),
        cfg.database_url_redacted()
    );
    listed
}

// ------------------------------------------------------------------ reindex

/// How long `reindex` waits for memories another embedder holds (a running
/// server's batch, or the claims of one that stopped mid-batch, which lapse
/// after two minutes) before it gives up.
const REINDEX_PATIENCE: std::time::Duration = std::time::Duration::from_secs(180);

async fn reindex(cfg: &Config, all: bool) -> anyhow::Result<()> {
    let Some(loaded) = zm_embed::load(cfg.embedding_model.as_deref()) else {
        bail!("this build has no embedding model (it was built without the `embed` feature)");
    };
    let encoder = loaded.map_err(|e| anyhow!("{e}"))?;
    let model = encoder.model().to_string();
    let store = open_store(cfg).await?;
    if all {
        let dropped = store.drop_vectors().await.map_err(tool)?;
        eprintln!("dropped {dropped} stored vectors");
    } else if let Some((other, n)) = store.vectors_of_another_model(&model).await.map_err(tool)? {
        // Run from a shell without the server's model setting, it would
        // replace every vector the server searches with another model's.
        bail!(
            "{n} stored vectors are of {other}, not of {model} (the model this command loaded: --embedding-model / ZM_EMBEDDING_MODEL). Give it the server's model setting; to move every memory to {model}, run `zero-memory reindex --all`"
        );
    }
    store.set_encoder(encoder);
    let pending = store.embedding_queue().await.map_err(tool)?;
    eprintln!("embedding {pending} memories with {model}");
    let started = std::time::Instant::now();
    let mut done = 0usize;
    let mut shown = 0usize;
    // Since this command last embedded something (or began).
    let mut progress = std::time::Instant::now();
    loop {
        let n = store.embed_pending(64).await.map_err(tool)?;
        if n == 0 {
            // Nothing this command may take: done, unless a running server
            // is embedding what is left (its claims), or a server that
            // stopped mid-batch left claims that lapse after two minutes.
            let left = store.embedding_queue().await.map_err(tool)?;
            if left == 0 {
                break;
            }
            if progress.elapsed() > REINDEX_PATIENCE {
                bail!(
                    "{left} memories are still without a vector of {model}, held by another embedder for over {} s; run reindex again later",
                    REINDEX_PATIENCE.as_secs()
                );
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            continue;
        }
        progress = std::time::Instant::now();
        done += n;
        if done - shown >= 1000 {
            shown = done;
            eprintln!("  {done} / {pending}");
        }
    }
    // Vectors made by this run, not memories read (a memory claimed and
    // then forgotten, or stored first by another embedder, is not one).
    // A text the model refuses is stored without a vector and not tried
    // again until the model changes: those are counted in the database,
    // whichever run or server refused them.
    let status = store.semantic_status();
    let embedded = usize::try_from(status.embedded).unwrap_or(usize::MAX);
    let refused = store.refused_memories().await.map_err(tool)?;
    store.close().await;
    let secs = started.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let rate = done as f64 / secs.max(1e-3);
    if refused == 0 {
        say(format!(
            "embedded {embedded} memories in {secs:.1} s ({rate:.0}/s): every live memory has a vector of {model}"
        ))
    } else {
        say(format!(
            "embedded {embedded} memories in {secs:.1} s ({rate:.0}/s); {refused} live memories were refused by the model (this run or earlier) and are found by full text only (`reindex --all` tries them again)"
        ))
    }
}

// ------------------------------------------------------------------ users

async fn user_add(cfg: &Config, email: &str, password_stdin: bool) -> anyhow::Result<()> {
    let (password, generated) = password_from(password_stdin)?;
    let store = create_store(cfg).await?;
    let user = store.create_user(email, &password).await.map_err(tool)?;
    store.close().await;
    eprintln!(
        "created user {} ({}){}",
        user.email,
        user.id,
        if user.is_owner { ", the owner" } else { "" }
    );
    if generated {
        eprintln!("its generated password (shown only now) follows on stdout:");
        emit_secret(
            &password,
            "the account was created, but its generated password (`zero-memory user passwd` sets another)",
        )?;
    }
    Ok(())
}

async fn user_list(cfg: &Config) -> anyhow::Result<()> {
    let store = open_store(cfg).await?;
    let users = store.list_users().await.map_err(tool)?;
    store.close().await;
    let rows: Vec<Vec<String>> = users
        .iter()
        .map(|u| {
            vec![
                u.id.clone(),
                u.email.clone(),
                if u.is_owner { "yes" } else { "" }.to_string(),
                if u.is_disabled() {
                    "disabled"
                } else {
                    "active"
                }
                .to_string(),
                if u.has_password { "set" } else { "not set" }.to_string(),
                rfc3339(u.created_at),
            ]
        })
        .collect();
    print_table(
        &["ID", "EMAIL", "OWNER", "STATUS", "PASSWORD", "CREATED"],
        &rows,
    )
}

async fn user_passwd(
    cfg: &Config,
    email: &str,
    password_stdin: bool,
    revoke_tokens: bool,
) -> anyhow::Result<()> {
    let (password, generated) = password_from(password_stdin)?;
    let store = open_store(cfg).await?;
    let user = find_user(&store, email).await?;
    let revoked = store
        .change_password(&user.id, &password, revoke_tokens)
        .await
        .map_err(tool)?;
    store.close().await;
    eprintln!(
        "changed the password of {}; revoked {} OAuth sign-in(s) (those apps sign in again)",
        user.email, revoked.oauth_families
    );
    if revoke_tokens {
        eprintln!(
            "revoked {} personal access token(s)",
            revoked.personal_tokens
        );
    } else {
        eprintln!("personal access tokens still work (--revoke-tokens revokes them too)");
    }
    if generated {
        eprintln!("the new generated password (shown only now) follows on stdout:");
        emit_secret(&password, "the password was changed, but the new one")?;
    }
    Ok(())
}

async fn user_disable(cfg: &Config, email: &str) -> anyhow::Result<()> {
    let store = open_store(cfg).await?;
    let user = find_user(&store, email).await?;
    let result = store.disable_user(&user.id).await;
    store.close().await;
    match result.map_err(tool)? {
        Some(revoked) => eprintln!(
            "disabled {}: its tokens and password are refused from now on; revoked {} OAuth sign-in(s). `zero-memory user enable {}` enables it again.",
            user.email, revoked.oauth_families, user.email
        ),
        None => eprintln!("{} was already disabled", user.email),
    }
    Ok(())
}

async fn user_enable(cfg: &Config, email: &str) -> anyhow::Result<()> {
    let store = open_store(cfg).await?;
    let user = find_user(&store, email).await?;
    let result = store.enable_user(&user.id).await;
    store.close().await;
    if result.map_err(tool)? {
        eprintln!(
            "enabled {}: its password and personal access tokens work again; OAuth apps sign in again",
            user.email
        );
    } else {
        eprintln!("{} was not disabled", user.email);
    }
    Ok(())
}

async fn user_owner(cfg: &Config, email: &str) -> anyhow::Result<()> {
    let store = open_store(cfg).await?;
    let user = find_user(&store, email).await?;
    let result = store.make_owner(&user.id).await;
    store.close().await;
    if result.map_err(tool)? {
        eprintln!(
            "{} is the owner now: stdio and team act as it without --user/--as",
            user.email
        );
    } else {
        eprintln!("{} already is the owner", user.email);
    }
    Ok(())
}

// ------------------------------------------------------------------ tokens

async fn token_create(
    cfg: &Config,
    email: &str,
    name: Option<&str>,
    read_only: bool,
    allow_account_delete: bool,
    expires: Option<Lifetime>,
) -> anyhow::Result<()> {
    let store = open_store(cfg).await?;
    // A disabled account's tokens are refused: a new one would be a
    // secret that opens nothing.
    let user = usable(find_user(&store, email).await?)?;
    let scopes: &[&str] = if read_only {
        &[SCOPE_READ]
    } else if allow_account_delete {
        &[SCOPE_READ, SCOPE_WRITE, SCOPE_ACCOUNT_DELETE]
    } else {
        &[SCOPE_READ, SCOPE_WRITE]
    };
    let (info, secret) = store
        .create_expiring_token(&user.id, name, scopes, expires.map(|l| l.ms))
        .await
        .map_err(tool)?;
    store.close().await;
    eprintln!(
        "created token {} for {} (scopes: {}; expires: {}); the secret (shown only now) follows on stdout:",
        info.id,
        user.email,
        info.scopes.join(" "),
        info.expires_at.map_or_else(|| "never".into(), rfc3339)
    );
    emit_secret(&secret, "the token was created, but its secret")?;
    Ok(())
}

async fn token_list(cfg: &Config, email: &str) -> anyhow::Result<()> {
    let store = open_store(cfg).await?;
    let user = find_user(&store, email).await?;
    let tokens = store.list_tokens(&user.id).await.map_err(tool)?;
    store.close().await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let rows: Vec<Vec<String>> = tokens
        .iter()
        .map(|t| {
            let status = if t.revoked_at.is_some() {
                "revoked"
            } else if t.expires_at.is_some_and(|e| e <= now) {
                "expired"
            } else if user.is_disabled() {
                // Refused while the account is: not "active".
                "disabled"
            } else {
                "active"
            };
            vec![
                t.id.clone(),
                t.name.clone().unwrap_or_default(),
                t.scopes.join(" "),
                status.to_string(),
                rfc3339(t.created_at),
                t.expires_at.map_or_else(|| "never".into(), rfc3339),
                t.last_used_at.map_or_else(|| "never".into(), rfc3339),
            ]
        })
        .collect();
    print_table(
        &[
            "ID",
            "NAME",
            "SCOPES",
            "STATUS",
            "CREATED",
            "EXPIRES",
            "LAST USED",
        ],
        &rows,
    )
}

async fn token_revoke(cfg: &Config, email: &str, token_id: &str) -> anyhow::Result<()> {
    let store = open_store(cfg).await?;
    let user = find_user(&store, email).await?;
    let result = store
        .revoke_token(&user.id, token_id.trim(), zm_store::Transport::Cli)
        .await;
    store.close().await;
    result.map_err(|e| revoke_failure(&e))?;
    eprintln!("revoked {}", token_id.trim());
    Ok(())
}

/// A revocation that failed. The store finds no token to revoke both when
/// there is none and when it was revoked before, so a `not_found` says
/// both; any other failure (the database, a rate limit) is said as it is.
fn revoke_failure(e: &ToolError) -> anyhow::Error {
    if e.code == zm_contracts::ErrorCode::NotFound {
        anyhow!("{} (or it is already revoked)", describe(e))
    } else {
        anyhow!("{}", describe(e))
    }
}

// ------------------------------------------------------------------ oauth

async fn oauth_clients(cfg: &Config, email: &str) -> anyhow::Result<()> {
    let store = open_store(cfg).await?;
    let user = find_user(&store, email).await?;
    let clients = store.list_oauth_clients(&user.id).await.map_err(tool)?;
    store.close().await;
    let rows: Vec<Vec<String>> = clients
        .iter()
        .map(|c| {
            vec![
                c.client.id.clone(),
                c.client.client_name.clone().unwrap_or_default(),
                c.scope.clone(),
                if c.revoked_at.is_some() {
                    "revoked".into()
                } else {
                    "active".into()
                },
                c.active_tokens.to_string(),
                rfc3339(c.authorized_at),
                c.last_used_at.map_or_else(|| "never".into(), rfc3339),
            ]
        })
        .collect();
    print_table(
        &[
            "ID",
            "NAME",
            "SCOPE",
            "STATUS",
            "LIVE TOKENS",
            "AUTHORIZED",
            "LAST USED",
        ],
        &rows,
    )
}

async fn oauth_revoke(cfg: &Config, email: &str, client_id: &str) -> anyhow::Result<()> {
    let store = open_store(cfg).await?;
    let user = find_user(&store, email).await?;
    let result = store.revoke_oauth_client(&user.id, client_id.trim()).await;
    store.close().await;
    result.map_err(|e| anyhow!("{}", describe(&e)))?;
    eprintln!("revoked {} for {}", client_id.trim(), user.email);
    Ok(())
}

// ------------------------------------------------------------------ export

async fn export(cfg: &Config, args: &ExportArgs) -> anyhow::Result<()> {
    let store = open_store(cfg).await?;
    let result = async {
        let user = find_user(&store, &args.user).await?;
        let count = match &args.out {
            Some(path) => export_to_file(&store, &user, args.page_size, path).await?,
            None => export_pages(&store, &user, args.page_size, &mut std::io::stdout()).await?,
        };
        anyhow::Ok((user.email, count))
    }
    .await;
    store.close().await;
    let (email, count) = result?;
    match &args.out {
        Some(path) => eprintln!("exported {count} memories of {email} to {}", path.display()),
        None => eprintln!("exported {count} memories of {email}"),
    }
    Ok(())
}

/// Export into `path` through a partial file renamed over the file `path`
/// names only once every page is written: a failed or interrupted export
/// leaves an earlier file whole instead of a truncated one. A symbolic
/// link (`latest.jsonl`) keeps being a link: the regular file it points at
/// (or would, when it dangles) is the one replaced, its partial file
/// written beside it. Only a device or a pipe (`>(gzip …)`) is written
/// into as it is, and this process's stdout (`--out /dev/stdout`, a
/// terminal, a pipe or the file the shell redirected it to) through the
/// descriptor the shell opened: its offset and append mode hold, so
/// `--out /dev/stdout >> all.jsonl` appends and nothing it held is cut.
async fn export_to_file(
    store: &Store,
    user: &User,
    page_size: u32,
    path: &Path,
) -> anyhow::Result<u64> {
    let target =
        match replaced_file(path).with_context(|| format!("cannot write {}", path.display()))? {
            Written::Replaced(target) => target,
            Written::Stdout => {
                let mut out = std::io::BufWriter::new(std::io::stdout());
                let n = export_pages(store, user, page_size, &mut out).await?;
                out.flush()
                    .with_context(|| format!("cannot write {}", path.display()))?;
                return Ok(n);
            }
            Written::AsItIs => {
                let mut file = crate::files::create_private_file(path)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                return export_pages(store, user, page_size, &mut file).await;
            }
        };
    // A name of this export's own, created new (never a file or link
    // that was there): two exports to one path each write whole, and the
    // later rename wins. Memories are private: created 0600.
    let mut partial = target.as_os_str().to_owned();
    partial.push(format!(
        ".{}.{}.partial",
        std::process::id(),
        random_secret(8).to_lowercase()
    ));
    let partial = std::path::PathBuf::from(partial);
    // Listening for a stop before the partial file exists, so that no
    // signal falls between the two (a first poll installs the handlers
    // where there are no Unix signals).
    let stop = crate::serve::stop_requested();
    tokio::pin!(stop);
    let _ = tokio::time::timeout(std::time::Duration::ZERO, stop.as_mut()).await;
    let mut file = crate::files::create_new_private_file(&partial)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    // Interrupted (Ctrl-C, SIGTERM, a hangup), the partial file goes too:
    // it holds memories, and no later run would use it.
    let exported = tokio::select! {
        r = export_pages(store, user, page_size, &mut file) => r,
        () = &mut stop => Err(anyhow::anyhow!(
            "interrupted: {} was not written",
            path.display()
        )),
    };
    let written = match exported {
        Ok(n) => file
            .sync_all()
            .and_then(|()| std::fs::rename(&partial, &target))
            .with_context(|| format!("cannot write {}", path.display()))
            .map(|()| n),
        Err(e) => Err(e),
    };
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}

/// How an export to a path is written.
enum Written {
    /// Through a partial file renamed over this regular file: `path`
    /// itself, or the file at the end of the symbolic links `path` is
    /// (renaming over the link would replace the link with a file).
    Replaced(std::path::PathBuf),
    /// Into this process's stdout, as it is open.
    Stdout,
    /// Into the path opened as it is: a device or a pipe.
    AsItIs,
}

/// How an export to `path` is written ([`Written`]).
fn replaced_file(path: &Path) -> std::io::Result<Written> {
    let is_link = match std::fs::symlink_metadata(path) {
        Ok(m) => m.file_type().is_symlink(),
        // A new file.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Written::Replaced(path.to_path_buf()));
        }
        Err(e) => return Err(e),
    };
    // Through the links, if any.
    match std::fs::metadata(path) {
        Ok(m) if is_stdout(&m) => Ok(Written::Stdout),
        Ok(m) if !m.is_file() => Ok(Written::AsItIs),
        Ok(_) if is_link => std::fs::canonicalize(path).map(Written::Replaced),
        Ok(_) => Ok(Written::Replaced(path.to_path_buf())),
        // A link to nothing yet: the export creates the file it names.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            dangling_target(path).map(Written::Replaced)
        }
        Err(e) => Err(e),
    }
}

/// The name a dangling symbolic link ends at, followed link by link (a
/// relative link is read from its own directory).
fn dangling_target(path: &Path) -> std::io::Result<std::path::PathBuf> {
    let mut at = path.to_path_buf();
    // As many links as Linux follows before it gives up (ELOOP).
    for _ in 0..40 {
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                let next = std::fs::read_link(&at)?;
                at = match at.parent() {
                    Some(dir) => dir.join(next),
                    None => next,
                };
            }
            Ok(_) => return Ok(at),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(at),
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("too many levels of symbolic links"))
}

/// Is this file the one this process's stdout writes to (`--out
/// /dev/stdout` with stdout redirected to a file)? The shell opened it:
/// replacing it by a rename would leave stdout writing to a file that no
/// longer has that name.
#[cfg(unix)]
fn is_stdout(file: &std::fs::Metadata) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| std::fs::File::from(fd).metadata().ok())
        .is_some_and(|out| out.dev() == file.dev() && out.ino() == file.ino())
}

#[cfg(not(unix))]
fn is_stdout(_file: &std::fs::Metadata) -> bool {
    false
}

/// Page through `export_memories`, writing each page as JSONL to `sink`
/// before asking for the next: at most one page is held at a time.
async fn export_pages(
    store: &Store,
    user: &User,
    page_size: u32,
    sink: &mut (dyn Write + Send),
) -> anyhow::Result<u64> {
    let caller = Caller::new(user.id.clone());
    let service = ToolService::new(store.clone());
    let mut input = ExportMemoriesInput::first_page(page_size);
    let mut count = 0u64;
    loop {
        let page = service
            .run::<zm_contracts::catalogue::tool::ExportMemories>(&caller, input.clone())
            .await
            .map_err(tool)?;
        let mut text = String::new();
        for m in &page.items {
            text.push_str(&serde_json::to_string(m)?);
            text.push('\n');
        }
        sink.write_all(text.as_bytes())
            .and_then(|()| sink.flush())
            .context("cannot write the export")?;
        count += u64::from(page.count);
        match page.next_cursor {
            Some(next) => input.cursor = Some(next),
            None => return Ok(count),
        }
    }
}

// ------------------------------------------------------------------ config

fn config_check(inputs: &Inputs) -> ExitCode {
    let cfg = match Config::resolve(inputs) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("configuration is INVALID:");
            for e in errors {
                eprintln!("  {e}");
            }
            return ExitCode::from(1);
        }
    };
    let report = || -> anyhow::Result<()> {
        match &cfg.config_file {
            Some(p) => say(format!("config file: {}", p.display()))?,
            None => say("config file: (none)")?,
        }
        let rows: Vec<Vec<String>> = cfg
            .report()
            .into_iter()
            .map(|(k, value, from)| vec![k.env.to_string(), value, from])
            .collect();
        print_table(&["KNOB", "VALUE", "FROM"], &rows)?;
        for note in crate::config::unknown_env_notes()
            .into_iter()
            .chain(cfg.config_file_note())
            .chain(cfg.ignored_data_dir_note())
        {
            say(format!("note: {note}"))?;
        }
        Ok(())
    };
    // A reader gone early ends the report quietly; a failed write is a
    // failure.
    let written = |result: anyhow::Result<()>| match result {
        Err(e) if e.downcast_ref::<StdoutClosed>().is_none() => {
            eprintln!("zero-memory: error: {e:#}");
            false
        }
        _ => true,
    };
    if !written(report()) {
        return ExitCode::from(1);
    }
    match cfg.validate().and_then(|()| model_loads(&cfg)) {
        Ok(()) => {
            if !written(say("configuration is valid")) {
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("configuration is INVALID:");
            for e in errors {
                eprintln!("  {e}");
            }
            ExitCode::from(1)
        }
    }
}

/// A model directory is loaded in the background once the server runs,
/// and one that fails leaves recall lexical: `config check` loads it
/// (the whole of it, as the server would) so that a corrupt or
/// unsupported model is found before.
fn model_loads(cfg: &Config) -> Result<(), Vec<String>> {
    let (crate::config::RecallMode::Hybrid, Some(dir)) =
        (cfg.recall_mode, cfg.embedding_model.as_deref())
    else {
        return Ok(());
    };
    match zm_embed::load(Some(dir)) {
        Some(Err(e)) => Err(vec![format!(
            "ZM_EMBEDDING_MODEL: {} does not load: {e}",
            dir.display()
        )]),
        _ => Ok(()),
    }
}

/// Write a secret shown only once to stdout; when stdout is closed (a
/// pipe whose reader is gone), say so on stderr instead of panicking,
/// naming what was done (`what`) and that the secret is lost.
fn emit_secret(secret: &str, what: &str) -> anyhow::Result<()> {
    // Any failure, a reader gone included, is an error here: the secret
    // is lost, and the caller must hear it.
    say(secret)
        .and_then(|()| Ok(std::io::stdout().flush()?))
        .map_err(|e| anyhow!("{what} could not be written to stdout ({e}) and is lost"))
}

/// Stdout was closed by its reader (`… | head`): the command ends there,
/// quietly and successfully, as the rest is not wanted.
#[derive(Debug)]
pub(crate) struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

/// Write one line of a command's result to stdout: a reader that has gone
/// is [`StdoutClosed`], any other failure (a full disk) an error.
pub(crate) fn say(line: impl std::fmt::Display) -> anyhow::Result<()> {
    writeln!(std::io::stdout().lock(), "{line}").map_err(|e| {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            anyhow::Error::new(StdoutClosed)
        } else {
            anyhow!("cannot write to stdout: {e}")
        }
    })
}

/// Print aligned columns to stdout ([`say`]).
pub(crate) fn print_table(header: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        say(s.trim_end())
    };
    line(header.to_vec())?;
    for r in rows {
        line(r.iter().map(String::as_str).collect())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys typed at the password prompt: Enter (CR or LF) ends the line,
    /// Backspace takes back a whole character, Ctrl-U the line, Ctrl-C
    /// interrupts; the end of input ends the line too.
    #[test]
    fn keys_at_the_password_prompt() {
        let keys = |bytes: &[u8]| read_keys(&mut &bytes[..]).unwrap();
        let line = |s: &str| Keys::Line(s.to_string());
        assert_eq!(keys(b"hunter22\r"), line("hunter22"));
        assert_eq!(keys(b"hunter22\nmore"), line("hunter22"));
        assert_eq!(keys("päß\u{7f}ss\n".as_bytes()), line("päss"));
        assert_eq!(keys("wrong\u{15}right\n".as_bytes()), line("right"));
        assert_eq!(keys(b"half\x03typed\n"), Keys::Interrupted);
        assert_eq!(keys(b"no end"), line("no end"));
        assert_eq!(keys(b"\x08\x08ok\n"), line("ok"));
        assert!(read_keys(&mut &b"\xff\n"[..]).is_err());
        // Ctrl-D ends an empty line; other control keys and the escape
        // sequences of arrow and Delete keys are left out.
        assert_eq!(keys(b"\x04"), line(""));
        assert_eq!(keys(b"ab\x04\x1acd\x1c\n"), line("abcd"));
        assert_eq!(keys(b"ab\x1b[Dc\x1b[3~d\x1bOAe\n"), line("abcde"));
    }

    #[test]
    fn the_mcp_library_says_info_only_at_debug() {
        assert_eq!(log_filter("info"), "info,rmcp=warn");
        assert_eq!(
            log_filter("info,zm_store=debug"),
            "info,zm_store=debug,rmcp=warn"
        );
        for unchanged in [
            "debug",
            "trace",
            "warn",
            "error",
            "info,rmcp=info",
            "zm_http=info",
        ] {
            assert_eq!(log_filter(unchanged), unchanged);
        }
        assert!(tracing_subscriber::EnvFilter::try_new(log_filter("info")).is_ok());
    }

    #[test]
    fn explicit_project_wins_and_plain_dir_falls_back_to_its_path() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            project_hint(Some(" git@github.com:a/b.git "), dir.path()).as_deref(),
            Some("git@github.com:a/b.git")
        );
        // A directory git finds no repository for, wherever the temporary
        // directory lives: a `.git` file that names none stops git's
        // search upwards with an error (in a repository's work tree, the
        // hint would be its remote or its root instead).
        std::fs::write(dir.path().join(".git"), "not a gitdir\n").unwrap();
        assert_eq!(
            project_hint(None, dir.path()),
            Some(dir.path().display().to_string())
        );
        assert_eq!(
            project_hint(Some("  "), dir.path()),
            Some(dir.path().display().to_string()),
            "a blank --project is no project"
        );
    }

    /// Only a token that was not found may have been revoked before: a
    /// failure of the database or a rate limit is said as it is.
    #[test]
    fn only_a_token_not_found_may_be_revoked_already() {
        let missing = revoke_failure(&ToolError::not_found("token not found")).to_string();
        assert_eq!(missing, "token not found (or it is already revoked)");
        for other in [
            ToolError::rate_limited("The server is busy; retry shortly."),
            ToolError::internal(),
        ] {
            let said = revoke_failure(&other).to_string();
            assert_eq!(said, other.message, "{said}");
        }
    }
}
