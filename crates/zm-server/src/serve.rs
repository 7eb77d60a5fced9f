//! `zero-memory serve`: the HTTP server.

use tokio_util::sync::CancellationToken;
use zm_store::Store;

use crate::config::Config;

/// The HTTP settings derived from the configuration.
pub fn http_config(cfg: &Config) -> zm_http::HttpConfig {
    let mut http = zm_http::HttpConfig::local(&cfg.public_base_url());
    http.allowed_hosts = cfg.allowed_hosts.clone();
    http.allowed_origins = cfg.allowed_origins.clone();
    http.body_limit = cfg.body_limit_bytes;
    http.token_rate_limit = cfg.token_rate_limit();
    http.max_sessions = cfg.max_sessions;
    http.session_idle = cfg.session_idle();
    http.capped_clients = cfg.capped_clients.clone();
    http.oauth_rate_max = cfg.oauth_ratelimit_max;
    http.oauth_rate_window = cfg.oauth_ratelimit_window();
    http.trust_proxy = cfg.trust_proxy;
    http.max_sessions_per_user = cfg.max_sessions_per_user;
    http.header_timeout = std::time::Duration::from_secs(cfg.header_timeout_secs);
    http.body_timeout = std::time::Duration::from_secs(cfg.body_timeout_secs);
    http.write_stall = std::time::Duration::from_secs(cfg.write_stall_secs);
    http.max_connections = cfg.max_connections;
    http
}

/// The banner `serve` prints to stderr at every start with the test-only
/// anonymous user.
pub fn test_mode_warning(email: &str) -> String {
    let line = "!".repeat(76);
    format!(
        "{line}\n\
!! WARNING: TEST MODE (ZM_TEST_ANONYMOUS_USER / --test-anonymous-user).\n\
!! Every /mcp request WITHOUT a token acts as {email}, with read and write\n\
!! access. This switch exists for the MCP conformance suite only.\n\
!! NEVER use it on a server anyone else can reach.\n\
{line}\n"
    )
}

/// Erase deleted teams whose 30 days are over: five minutes after start
/// (a machine that boots with its clock far ahead has had time to set it:
/// an erasure cannot be undone), then hourly, until shutdown. A failure
/// is logged and retried at the next tick.
fn spawn_team_purge(store: Store, cancel: CancellationToken) {
    tokio::spawn(async move {
        let hour = std::time::Duration::from_secs(3600);
        let first = tokio::time::Instant::now() + std::time::Duration::from_secs(300);
        let mut tick = tokio::time::interval_at(first, hour);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            match store.purge_deleted_teams().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(teams = n, "erased deleted teams past their 30 days"),
                Err(e) => tracing::warn!(error = %e.message, "purging deleted teams failed"),
            }
        }
    });
}

/// Write the buffered recall counts every [`zm_store::usage::FLUSH_EVERY`]
/// until shutdown (whose own flush writes the rest), whether or not a
/// recall comes to notice they are due: an agent that recalls, then goes
/// quiet, has its counts on the Insight page (served by another process,
/// on a shared database) within the interval, and a process killed
/// outright loses one interval's at most.
pub(crate) fn spawn_usage_flush(store: Store, cancel: CancellationToken) {
    tokio::spawn(async move {
        let every = zm_store::usage::FLUSH_EVERY;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(e) = store.flush_usage().await {
                tracing::warn!(error = %e.message, "writing recall counts failed");
            }
        }
    });
}

/// Whether SIGHUP was ignored when this process started: `nohup` (or a
/// supervisor) asked for a hangup to change nothing, and listening for it
/// would undo that. Read once, before any handler is installed.
#[cfg(unix)]
fn hangup_ignored_at_start() -> bool {
    static IGNORED: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
        std::fs::read_to_string("/proc/self/status").is_ok_and(|s| hangup_ignored_in(&s))
    });
    *IGNORED
}

/// Does this `/proc/<pid>/status` text say SIGHUP is ignored? `SigIgn` is a
/// hex mask of ignored signals, signal `n` at bit `n - 1`; SIGHUP is 1.
/// Unreadable (another system than Linux): no, and a hangup is listened for.
fn hangup_ignored_in(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & 1 == 1)
}

/// Resolves on SIGTERM, SIGHUP (the terminal that started it closed: its
/// default would end the process on the spot; unless it was started with
/// SIGHUP ignored, as `nohup` does, when a hangup changes nothing) or
/// Ctrl-C: each shuts down gracefully. The signals are listened for from
/// this call on (a signal stream hears only what comes after it is made),
/// so call it before telling anyone the process runs.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    let first = stop_requested();
    async move {
        first.await;
        tracing::info!("shutting down: finishing requests in flight");
    }
}

/// The end of `serve` and `stdio`, once their requests are answered and
/// `cancel` told the background tasks: the embedder's batch, the last
/// recall counts, then the store's close. Each of the first two is
/// bounded ([`STOP_WAIT`]): a batch on a database link gone dead (or a
/// large model mid-batch) must not hold the stop for good, and a second
/// signal no longer cuts it short. What the embedder leaves uncommitted
/// rolls back and is embedded at the next start.
pub(crate) async fn wind_down(store: &Store, embedder: Option<tokio::task::JoinHandle<()>>) {
    wind_down_within(store, embedder, STOP_WAIT).await;
}

/// [`wind_down`], waiting `wait` for each of its bounded steps.
async fn wind_down_within(
    store: &Store,
    embedder: Option<tokio::task::JoinHandle<()>>,
    wait: std::time::Duration,
) {
    if let Some(mut e) = embedder
        && tokio::time::timeout(wait, &mut e).await.is_err()
    {
        // Ended, so that it holds none of the connections the close
        // waits for.
        e.abort();
        tracing::warn!(
            wait_s = wait.as_secs(),
            "the embedder did not stop in time; its batch is left to the next start"
        );
    }
    match tokio::time::timeout(wait, store.flush_usage()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e.message, "writing the last recall counts failed"),
        Err(_) => tracing::warn!(
            wait_s = wait.as_secs(),
            "writing the last recall counts did not finish in time"
        ),
    }
    store.close().await;
}

/// How long a stop waits for the embedder's batch, and then for the last
/// recall counts to be written.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// `serve`'s [`shutdown_signal`]: besides, a second SIGTERM or Ctrl-C
/// while requests finish (an operator's second Ctrl-C, a supervisor's
/// impatience) ends the process at once, until `drained` is cancelled
/// (the requests are done: what follows, the embedder's batch, the last
/// recall counts and the database's close, is bounded and not cut). Committed writes are durable;
/// a transaction not yet committed rolls back. A second hangup is not one:
/// a closing terminal may send it twice.
pub(crate) fn serve_shutdown_signal(
    drained: CancellationToken,
) -> impl std::future::Future<Output = ()> {
    let first = stop_requested();
    async move {
        first.await;
        // Listened for before the line below is written, so none sent
        // after it is missed.
        let second = impatient_signals();
        tokio::spawn(async move {
            tokio::select! {
                () = second => {
                    tracing::warn!("stopping at once: a second signal came while requests were finishing");
                    std::process::exit(SECOND_SIGNAL_EXIT);
                }
                () = drained.cancelled() => {}
            }
        });
        tracing::info!(
            "shutting down: finishing requests in flight (a second SIGTERM or Ctrl-C stops at once)"
        );
    }
}

/// SIGTERM or SIGINT (a hangup is not one), listened for from this call
/// on.
fn impatient_signals() -> impl std::future::Future<Output = ()> {
    stop_signals(false)
}

/// Resolves on SIGTERM or SIGINT, and on SIGHUP too when `hangup`;
/// listened for from this call on, not from the first poll.
#[cfg(unix)]
fn stop_signals(hangup: bool) -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = |kind: SignalKind| signal(kind).ok();
    let hangup = if hangup {
        listen(SignalKind::hangup())
    } else {
        None
    };
    let (term, interrupt) = (
        listen(SignalKind::terminate()),
        listen(SignalKind::interrupt()),
    );
    async move {
        tokio::select! {
            () = heard(term) => {},
            () = heard(interrupt) => {},
            () = heard(hangup) => {},
        }
    }
}

/// [`stop_signals`] where there are no Unix signals: Ctrl-C.
#[cfg(not(unix))]
fn stop_signals(_hangup: bool) -> impl std::future::Future<Output = ()> {
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Resolves when `s` is heard; never if it could not be listened for.
#[cfg(unix)]
async fn heard(s: Option<tokio::signal::unix::Signal>) {
    match s {
        Some(mut s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// The exit status of a process a second signal stopped mid-shutdown.
pub(crate) const SECOND_SIGNAL_EXIT: i32 = 130;

/// Resolves when the process is asked to stop ([`shutdown_signal`]'s
/// signals), saying nothing: a command that must clean up first (an
/// export's partial file) races its work against it. The signals are
/// listened for from this call on, not from the first poll.
pub(crate) fn stop_requested() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let hangup = !hangup_ignored_at_start();
    #[cfg(not(unix))]
    let hangup = false;
    stop_signals(hangup)
}

/// The listener `serve` answers on, bound before anything else is done
/// (a port taken, or not this user's to take, fails the command before
/// the database is migrated or a first start's owner made), and the
/// configuration with the address really bound (`--listen 127.0.0.1:0`
/// picks a port): the URLs the server advertises (the first start's
/// banner, OAuth metadata) carry it.
pub async fn bind(cfg: &Config) -> anyhow::Result<(tokio::net::TcpListener, Config)> {
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen))?;
    let mut shown = cfg.clone();
    shown.listen = listener.local_addr().unwrap_or(cfg.listen);
    Ok((listener, shown))
}

/// Serve HTTP on `listener` (from [`bind`], whose configuration `cfg` is)
/// until SIGTERM or Ctrl-C; requests in flight finish, then the database
/// pool closes, so no acknowledged write is lost.
pub async fn run(
    cfg: &Config,
    store: Store,
    listener: tokio::net::TcpListener,
) -> anyhow::Result<()> {
    if !cfg.listen.ip().is_loopback() && cfg.public_url.is_none() {
        tracing::warn!(
            target: crate::commands::OPERATOR,
            listen = %cfg.listen,
            "listening beyond loopback without ZM_PUBLIC_URL: MCP over HTTP answers only requests addressed to localhost or a host in ZM_ALLOWED_HOSTS, and OAuth advertises {}; set ZM_PUBLIC_URL to the address clients use",
            cfg.public_base_url()
        );
    }
    if cfg.trust_proxy && !cfg.listen.ip().is_loopback() {
        tracing::warn!(
            target: crate::commands::OPERATOR,
            listen = %cfg.listen,
            "ZM_TRUST_PROXY takes X-Forwarded-For from whoever connects, and this server listens beyond loopback: any host that reaches this port can name its own address (and escape the per-address sign-in limits); let only the proxy reach it (a firewall), or listen on loopback behind a proxy on this machine"
        );
    }
    if cfg.cleartext_public_url() {
        tracing::warn!(
            target: crate::commands::OPERATOR,
            public_url = %cfg.public_base_url(),
            "ZM_PUBLIC_URL is plain http to another machine: passwords, OAuth codes and tokens cross the network in clear text and cookies are not Secure; serve it over https (a reverse proxy: docs/REVERSE_PROXY.md)"
        );
    }
    let mut http = http_config(cfg);
    if let Some(email) = &cfg.test_anonymous_user {
        let user = store
            .user_by_email(email)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .ok_or_else(|| anyhow::anyhow!("ZM_TEST_ANONYMOUS_USER: no user {email}"))?;
        if user.is_disabled() {
            anyhow::bail!("ZM_TEST_ANONYMOUS_USER: the account {email} is disabled");
        }
        match cfg.log_format {
            crate::config::LogFormat::Text => {
                tracing::warn!(user = %email, "TEST MODE: /mcp requests without a token act as this user");
                eprint!("{}", test_mode_warning(email));
            }
            crate::config::LogFormat::Json => tracing::warn!(
                target: crate::commands::OPERATOR,
                user = %email,
                "TEST MODE: /mcp requests without a token act as this user; never use it on a server anyone else can reach"
            ),
        }
        http.test_anonymous_user = Some(user.id);
    }
    let cancel = CancellationToken::new();
    spawn_team_purge(store.clone(), cancel.clone());
    spawn_usage_flush(store.clone(), cancel.clone());
    let embedder = crate::embedder::spawn(store.clone(), cfg, cancel.clone());
    let limits = http.conn_limits();
    let state = zm_http::state(store.clone(), http);
    let refused = state.metrics.connections_refused.clone();
    let app = zm_http::router_with_state(state, cancel.clone());
    // Listened for before the banner: a stop sent once it is out is heard.
    let drained = CancellationToken::new();
    let stop = serve_shutdown_signal(drained.clone());
    // The banner for a person; JSON logs get it as an event whatever the
    // filter, as text mode prints it whatever the filter.
    if cfg.log_format == crate::config::LogFormat::Json {
        tracing::info!(target: crate::commands::OPERATOR, listen = %cfg.listen, mcp = %cfg.mcp_url(), version = env!("CARGO_PKG_VERSION"), "zero-memory is serving");
    } else {
        tracing::info!(listen = %cfg.listen, mcp = %cfg.mcp_url(), "zero-memory is serving");
        eprintln!(
            "zero-memory {} serving on http://{} (MCP at {}, REST at {}/api)",
            env!("CARGO_PKG_VERSION"),
            cfg.listen,
            cfg.mcp_url(),
            cfg.public_base_url()
        );
    }
    zm_http::serve(listener, app, limits, refused, cancel.clone(), stop).await?;
    drained.cancel();
    cancel.cancel();
    wind_down(&store, embedder).await;
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    /// A stop does not wait for an embedder that never ends (a batch on a
    /// database link gone dead): it goes on to close the store.
    #[tokio::test]
    async fn a_stop_does_not_wait_for_an_embedder_that_never_ends() {
        let dir = tempfile::tempdir().unwrap();
        let store = zm_store::Store::open(&zm_store::sqlite_url(&dir.path().join("t.db")))
            .await
            .unwrap();
        let stuck = tokio::spawn(std::future::pending::<()>());
        let stopped = tokio::time::timeout(
            std::time::Duration::from_secs(120),
            super::wind_down_within(&store, Some(stuck), std::time::Duration::from_millis(50)),
        )
        .await;
        assert!(stopped.is_ok(), "the stop waited for the embedder");
    }

    #[test]
    fn an_ignored_hangup_is_read_from_the_status_mask() {
        let status = |mask: &str| {
            format!(
                "Name:\tzero-memory\nSigBlk:\t0000000000000000\nSigIgn:\t{mask}\nSigCgt:\t0000000180004a02\n"
            )
        };
        assert!(super::hangup_ignored_in(&status("0000000000000001")));
        assert!(super::hangup_ignored_in(&status("0000000000001001")));
        assert!(!super::hangup_ignored_in(&status("0000000000001000")));
        assert!(!super::hangup_ignored_in(&status("0000000000000000")));
        assert!(!super::hangup_ignored_in("Name:\tx\n"));
        assert!(!super::hangup_ignored_in("SigIgn:\tnot hex\n"));
    }
}
