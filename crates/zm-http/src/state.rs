//! Shared state and configuration of the HTTP surface.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Mutex;
use zm_store::{Store, ToolService};

use crate::request::{ip_limit_key, ip_network_key};

/// What the HTTP layer needs to know.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The external base URL (no trailing slash), e.g. `https://memory.example.com`.
    pub public_url: String,
    /// Host values accepted besides loopback (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted on `/mcp` besides the server's own (a
    /// request from any other `Origin` is refused; empty: only its own).
    pub allowed_origins: Vec<String>,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    /// Requests per minute per account, all its tokens together (`None`: no limit).
    pub token_rate_limit: Option<u32>,
    /// MCP sessions open at most, all users together; beyond it a new
    /// session is refused (503), never another user's evicted.
    pub max_sessions: usize,
    /// MCP sessions one user keeps at most; opening one more ends that
    /// user's least recently used session.
    pub max_sessions_per_user: usize,
    /// Idle time after which an MCP session ends.
    pub session_idle: Duration,
    /// Client names whose instructions are capped.
    pub capped_clients: Vec<String>,
    /// TEST ONLY (the MCP conformance suite cannot send a token): a user
    /// id that `/mcp` requests WITHOUT any `Authorization` header act as.
    /// The binary allows it only on a loopback listen address.
    pub test_anonymous_user: Option<String>,
    /// Requests per client IP and route allowed on the OAuth POST endpoints
    /// (`/oauth/register`, `/oauth/authorize`, `/oauth/token`,
    /// `/oauth/revoke`) per window.
    pub oauth_rate_max: u32,
    /// The fixed window of that limit (anchored at the first request).
    pub oauth_rate_window: Duration,
    /// Take the client IP from the right-most `X-Forwarded-For` hop (the one
    /// our proxy appended; only behind a proxy that sets it); otherwise the
    /// socket address is used.
    pub trust_proxy: bool,
    /// Time allowed for a request's headers (and for an idle keep-alive
    /// connection's next request) before the connection is closed.
    pub header_timeout: Duration,
    /// Time allowed for a request's whole body to arrive.
    pub body_timeout: Duration,
    /// Time a response may wait on a client that takes none of it.
    pub write_stall: Duration,
    /// Client connections served at once.
    pub max_connections: usize,
}

/// The `Strict-Transport-Security` of every answer behind an https
/// public URL (it holds for the whole host): a year, and no
/// `includeSubDomains` (the server may share its domain with sites that
/// are not ours, nor all https).
pub(crate) const HSTS: &str = "max-age=31536000";

/// Middleware (`axum::middleware::map_response_with_state`, given the
/// configuration): [`HttpConfig::strict_transport`] on every answer
/// (`with_layers`, outside the panic catcher and the fallback).
pub(crate) async fn strict_transport(
    axum::extract::State(cfg): axum::extract::State<Arc<HttpConfig>>,
    mut resp: axum::response::Response,
) -> axum::response::Response {
    cfg.strict_transport(resp.headers_mut());
    resp
}

/// Is the public URL `https://`? What the cookies' `Secure` and HSTS are
/// decided on.
pub(crate) fn is_https(public_url: &str) -> bool {
    url::Url::parse(public_url).is_ok_and(|u| u.scheme() == "https")
}

/// `base` as the url crate writes it (scheme and host lowercased, a
/// default port dropped), without a trailing slash: the one spelling the
/// issuer, the resource and the cookies' `Secure` are decided on. What does
/// not parse is kept as given.
pub(crate) fn normalise_base(base: &str) -> String {
    let base = base.trim().trim_end_matches('/');
    match url::Url::parse(base) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {
            u.as_str().trim_end_matches('/').to_string()
        }
        _ => base.to_string(),
    }
}

impl HttpConfig {
    /// A configuration for the server at `base` (normalised: see
    /// `normalise_base`) with the defaults.
    pub fn local(base: &str) -> Self {
        HttpConfig {
            public_url: normalise_base(base),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            body_limit: 1024 * 1024,
            token_rate_limit: None,
            max_sessions: 200,
            session_idle: Duration::from_secs(1800),
            capped_clients: vec!["claude-code".into()],
            test_anonymous_user: None,
            oauth_rate_max: 30,
            oauth_rate_window: Duration::from_secs(60),
            trust_proxy: false,
            max_sessions_per_user: 20,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            write_stall: Duration::from_secs(300),
            max_connections: 1024,
        }
    }

    /// The connection limits [`crate::serve`] applies.
    pub fn conn_limits(&self) -> crate::ConnLimits {
        crate::ConnLimits {
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            write_stall: self.write_stall,
            max_connections: self.max_connections,
        }
    }

    /// The path prefix of the public URL ([`PathPrefix`]): what every URL
    /// the dashboard emits starts with.
    pub(crate) fn path_prefix(&self) -> PathPrefix {
        PathPrefix::of(&self.public_url)
    }

    /// Add `Strict-Transport-Security` ([`HSTS`]) to a browser-facing
    /// response when the public URL is https (decided on the parsed
    /// scheme, as the cookies' `Secure` is): a browser that reached the
    /// server over https once never goes to it over plain http again
    /// (a typed `http://` link, a downgrading network), where its
    /// session cookie and the sign-in forms would travel in the clear.
    /// Never over plain http, where a browser ignores it anyway and a
    /// local server must stay reachable.
    pub(crate) fn strict_transport(&self, h: &mut axum::http::HeaderMap) {
        if is_https(&self.public_url) {
            h.insert(
                axum::http::header::STRICT_TRANSPORT_SECURITY,
                axum::http::HeaderValue::from_static(HSTS),
            );
        }
    }

    /// The RFC 9728 metadata URL advertised in 401 challenges.
    pub fn resource_metadata_url(&self) -> String {
        format!(
            "{}/.well-known/oauth-protected-resource/mcp",
            self.public_url
        )
    }

    /// May a browser form sent from `origin` to the host `host` (the
    /// request's `Host`) change anything? The public URL's own origin, or
    /// the very host the request came to when that host is one the server
    /// answers to (a loopback alias, the public host, an allowed host):
    /// `http://localhost:8787` while the public URL says `127.0.0.1`. A page
    /// of another site sends its own origin, never ours, and a rebinding
    /// site's host is not allowed.
    pub fn form_origin_ok(&self, origin: &str, host: Option<&str>) -> bool {
        if origin_of(&self.public_url).as_deref() == Some(origin) {
            return true;
        }
        let Some(host) = host.map(str::to_ascii_lowercase) else {
            return false;
        };
        let bare = match host.rsplit_once(':') {
            Some((h, port))
                if !h.is_empty()
                    && port.bytes().all(|b| b.is_ascii_digit())
                    && !host.ends_with(']') =>
            {
                h
            }
            _ => host.as_str(),
        };
        // A configured host without a port stands for any port, as on /mcp.
        let known = ["localhost", "127.0.0.1", "[::1]"].contains(&bare)
            || self
                .hosts()
                .iter()
                .any(|h| h.eq_ignore_ascii_case(&host) || h.eq_ignore_ascii_case(bare));
        known
            && [format!("http://{host}"), format!("https://{host}")]
                .iter()
                .any(|o| o.eq_ignore_ascii_case(origin))
    }

    /// May a request sent from a browser page at `origin` reach `/mcp`?
    /// What [`form_origin_ok`](Self::form_origin_ok) accepts (our own
    /// pages), or an origin the operator listed in `allowed_origins`,
    /// compared as origins (scheme, host and port; a default port written
    /// or not). Anything else is another site's page: MCP's transport rules
    /// say to refuse it, with or without a configured list, so that a page
    /// the user happens to visit cannot drive a local server.
    pub fn mcp_origin_ok(&self, origin: &str, host: Option<&str>) -> bool {
        if self.form_origin_ok(origin, host) {
            return true;
        }
        let Some(sent) = origin_of(origin) else {
            return false;
        };
        self.allowed_origins
            .iter()
            .any(|a| origin_of(a).is_some_and(|a| a.eq_ignore_ascii_case(&sent)))
    }

    /// Every Host value `/mcp` accepts.
    pub fn hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1", "[::1]"]
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        if let Some(h) = host_of(&self.public_url) {
            hosts.push(h);
        }
        hosts.extend(self.allowed_hosts.iter().cloned());
        hosts
    }
}

/// The host of an absolute URL as a `Host` header carries it: lowercased,
/// IPv6 literals in brackets, the port only when it is not the scheme's
/// default, never userinfo. The one host parser of the HTTP surface.
pub fn host_of(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    let host = u.host_str().filter(|h| !h.is_empty())?;
    Some(match u.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}

/// The origin (`scheme://host[:port]`) of an absolute URL, as browsers send
/// it in `Origin`; `None` for URLs without one (opaque origins).
pub fn origin_of(url: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()
        .map(|u| u.origin())
        .filter(url::Origin::is_tuple)
        .map(|o| o.ascii_serialization())
}

/// The path a proxy serves the server under, taken from the public URL:
/// `""` at the root, `/zm` for `https://host/zm` (the proxy strips it and
/// forwards to our root, so the router never sees it). The one place that
/// path is derived: the cookies' `Path` ([`CookieScope`]) and every URL the
/// dashboard emits — links, form actions, assets, redirects, return-to
/// targets ([`join`](Self::join), [`strip`](Self::strip)) — follow it.
///
/// A public URL that does not parse, or whose path could not be written in
/// a cookie attribute or a root-relative URL (a `;`, a byte that is not
/// printable ASCII, an empty segment: `//host` would name another site),
/// gives no prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PathPrefix(String);

impl PathPrefix {
    /// The prefix of the server at `public_url`.
    pub(crate) fn of(public_url: &str) -> Self {
        let path = url::Url::parse(public_url)
            .map(|u| u.path().trim_end_matches('/').to_string())
            .unwrap_or_default();
        if path.bytes().all(|b| b.is_ascii_graphic() && b != b';') && !path.contains("//") {
            PathPrefix(path)
        } else {
            PathPrefix::default()
        }
    }

    /// `""` or `/zm`: no trailing slash.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The public path of `route`, one of our paths as the router sees it
    /// (starting with `/`, query allowed): `/zm/memories/x` for
    /// `/memories/x`, `/zm/` for `/`; without a prefix, `route` as it is.
    pub(crate) fn join(&self, route: &str) -> String {
        debug_assert!(route.starts_with('/'), "a route starts with /: {route}");
        format!("{}{route}", self.0)
    }

    /// The route a public path names, when it is under the prefix (the
    /// inverse of [`join`](Self::join)): `/zm/x?y` is `/x?y` and `/zm` is
    /// `/`; `/zmx`, `/other` and anything not starting with `/` are not
    /// ours (`None`). Without a prefix, any path starting with `/`.
    pub(crate) fn strip<'a>(&self, public: &'a str) -> Option<&'a str> {
        let rest = public.strip_prefix(self.0.as_str())?;
        if rest.is_empty() && !self.0.is_empty() {
            return Some("/");
        }
        rest.starts_with('/').then_some(rest)
    }
}

/// Where a cookie of ours applies, behind the public URL: the one place the
/// dashboard's cookies and the OAuth sign-in form's decide their `Path` and
/// `Secure`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CookieScope {
    /// The public URL's path prefix ([`PathPrefix`]) followed by `under`,
    /// `/` when both are empty: `https://host/zm` scopes the dashboard
    /// (`""`) to `/zm` and the OAuth form (`"/oauth"`) to `/zm/oauth`.
    /// `/zm`, not `/zm/`: a cookie path also matches the bare `/zm` (and
    /// never `/zmx`, RFC 6265 §5.1.4).
    pub(crate) path: String,
    /// The public URL is https (decided on the parsed scheme, whatever the
    /// spelling).
    pub(crate) secure: bool,
}

impl CookieScope {
    /// The scope of the routes at `under` (`""` or a path starting with
    /// `/`) of the server at `public_url`.
    pub(crate) fn of(public_url: &str, under: &str) -> Self {
        let secure = is_https(public_url);
        let path = format!("{}{under}", PathPrefix::of(public_url).as_str());
        CookieScope {
            path: if path.is_empty() { "/".into() } else { path },
            secure,
        }
    }

    /// The name cookie `base` goes by in this scope. Behind https, with the
    /// prefix a browser enforces (RFC 6265bis §4.1.3): `__Host-` at the
    /// root (set by this host alone, over https, for `/`: a neighbouring
    /// subdomain cannot plant one to shadow ours, as it could a plain
    /// name by a cookie of a longer path, sent first), `__Secure-` under a
    /// path (set over https only). Over plain http (a local server), the
    /// name itself.
    pub(crate) fn name(&self, base: &str) -> String {
        match (self.secure, self.path.as_str()) {
            (true, "/") => format!("__Host-{base}"),
            (true, _) => format!("__Secure-{base}"),
            (false, _) => base.to_string(),
        }
    }

    /// The value a request carries for cookie `base` in this scope. Behind
    /// https only when it carries exactly one: we set each cookie under one
    /// name and one path, so two values there are someone else's doing (an
    /// https neighbour's `Domain=` cookie with a longer `Path`, sent first,
    /// which `__Secure-` does not prevent): neither is read, which signs
    /// the browser out rather than into another account. Over plain http
    /// (where anyone on the path can set any cookie anyway, and two local
    /// servers on one host share their cookies) the first one sent.
    pub(crate) fn read(&self, headers: &axum::http::HeaderMap, base: &str) -> Option<String> {
        let name = self.name(base);
        let mut values = headers
            .get_all(axum::http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string());
        let first = values.next()?;
        (!self.secure || values.next().is_none()).then_some(first)
    }

    /// A `Set-Cookie` value for cookie `base` ([`Self::name`]): `HttpOnly`,
    /// with `same_site`, this scope's `Path` and `Secure` (`max_age` 0 and
    /// an empty value clear it; a cookie is cleared only under the `Path`
    /// it was set with).
    pub(crate) fn set_cookie(
        &self,
        base: &str,
        value: &str,
        max_age: u64,
        same_site: &str,
    ) -> String {
        format!(
            "{}={value}; Path={}; Max-Age={max_age}; HttpOnly; SameSite={same_site}{}",
            self.name(base),
            self.path,
            if self.secure { "; Secure" } else { "" }
        )
    }
}

/// Prometheus counters of the HTTP layer: counts only, never user data.
/// (Tool calls are counted by the tool service, for every transport.)
#[derive(Debug, Default)]
pub struct Metrics {
    pub requests: Mutex<HashMap<u16, u64>>,
    pub unauthorized: AtomicU64,
    pub rate_limited: AtomicU64,
    /// Connections refused at `ZM_MAX_CONNECTIONS` (answered 503 before
    /// any request was read: in no status count).
    pub connections_refused: Arc<AtomicU64>,
    /// MCP sessions refused at the server's cap (503).
    pub mcp_sessions_refused: AtomicU64,
    /// The database's gauges (storage totals, the embedding queue) as last
    /// read, with the instant their reading began. One scrape reads them at
    /// a time; a scrape that waited reuses a reading begun after it asked.
    pub(crate) db_gauges: Mutex<Option<(Instant, String)>>,
}

impl Metrics {
    /// The database's gauges for a scrape that asked at `asked`: read by
    /// `read` unless a reading begun since then is at hand. Scrapes read
    /// them one at a time (they scan the memories), so any number of
    /// anonymous `GET /metrics` hold at most one pooled connection, and
    /// none is served figures older than its own request.
    pub(crate) async fn db_gauges<F>(&self, asked: Instant, read: F) -> String
    where
        F: std::future::Future<Output = String>,
    {
        let mut held = self.db_gauges.lock().await;
        if let Some((began, text)) = held.as_ref()
            && *began >= asked
        {
            return text.clone();
        }
        let began = Instant::now();
        let text = read.await;
        *held = Some((began, text.clone()));
        text
    }

    pub async fn request(&self, status: u16) {
        *self.requests.lock().await.entry(status).or_default() += 1;
    }
    /// The counters as Prometheus text; `writes_refused` is the store's
    /// count of writes refused at its cap ([`Store::writes_refused`]).
    pub async fn render(&self, writes_refused: u64) -> String {
        let mut out = String::new();
        out.push_str("# HELP zm_http_requests_total HTTP responses by status.\n# TYPE zm_http_requests_total counter\n");
        let mut req: Vec<_> = self
            .requests
            .lock()
            .await
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        req.sort();
        for (s, n) in req {
            out.push_str(&format!("zm_http_requests_total{{status=\"{s}\"}} {n}\n"));
        }
        out.push_str(&format!(
            "# HELP zm_unauthorized_total Requests refused for missing or bad credentials.\n# TYPE zm_unauthorized_total counter\nzm_unauthorized_total {}\n",
            self.unauthorized.load(Ordering::Relaxed)
        ));
        out.push_str(&format!(
            "# HELP zm_rate_limited_total Requests refused by a rate limit.\n# TYPE zm_rate_limited_total counter\nzm_rate_limited_total {}\n",
            self.rate_limited.load(Ordering::Relaxed)
        ));
        out.push_str("# HELP zm_overload_refused_total Work refused because the server was at a cap: connections (ZM_MAX_CONNECTIONS), mcp_sessions (the MCP session cap), writes (writes still running).\n# TYPE zm_overload_refused_total counter\n");
        for (what, n) in [
            (
                "connections",
                self.connections_refused.load(Ordering::Relaxed),
            ),
            (
                "mcp_sessions",
                self.mcp_sessions_refused.load(Ordering::Relaxed),
            ),
            ("writes", writes_refused),
        ] {
            out.push_str(&format!(
                "zm_overload_refused_total{{what=\"{what}\"}} {n}\n"
            ));
        }
        out
    }
}

/// The rate limits' time: monotonic `Instant::now()` plus an offset that
/// tests advance instead of sleeping. Clones share the offset.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    offset_ms: Arc<AtomicU64>,
}

impl Clock {
    pub fn now(&self) -> Instant {
        Instant::now() + Duration::from_millis(self.offset_ms.load(Ordering::Relaxed))
    }

    /// Wall time in epoch milliseconds, moved by the same offset: what the
    /// windows kept in the database are measured in.
    pub fn wall_ms(&self) -> i64 {
        let sys = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let offset = i64::try_from(self.offset_ms.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        sys.saturating_add(offset)
    }

    /// Move the clock forward (tests: rate-limit windows).
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.offset_ms.fetch_add(ms, Ordering::Relaxed);
    }
}

/// Keys a [`RateLimiter`] tracks at most by default.
pub const RATE_LIMIT_KEYS: usize = 100_000;

/// A fixed-window counter per key, over at most `capacity` keys — in
/// this process, or (built with [`RateLimiter::shared`]) in the database,
/// where every instance on it counts against the same windows.
///
/// The cost of a hit does not grow with the number of keys: the keys are
/// kept in a queue by last use (a hit appends the key; the entry it leaves
/// behind is stale and skipped), ended windows are dropped from its front,
/// and when the map is full the least recently used key is forgotten —
/// which only ever gives that key a fresh window. Stale entries are swept
/// once they outnumber the live ones, so a hit is O(1) amortised.
#[derive(Debug)]
pub struct RateLimiter {
    windows: std::sync::Mutex<Windows>,
    clock: Clock,
    /// Count in this store's `rate_windows` instead of in memory.
    shared: Option<Store>,
}

impl Default for RateLimiter {
    fn default() -> Self {
        RateLimiter::with_capacity(Clock::default(), RATE_LIMIT_KEYS)
    }
}

/// One key's window.
#[derive(Debug)]
struct Window {
    /// When the window ends (anchored at its first request).
    ends: Instant,
    /// Requests counted in it.
    count: u32,
    /// The stamp of the key's newest entry in the queue.
    stamp: u64,
}

#[derive(Debug)]
struct Windows {
    map: HashMap<Arc<str>, Window>,
    /// `(stamp, key)` by last use, oldest first; an entry whose stamp is
    /// not its key's current one is stale.
    queue: VecDeque<(u64, Arc<str>)>,
    capacity: usize,
    stamp: u64,
}

impl Windows {
    fn is_live(&self, stamp: u64, key: &str) -> bool {
        self.map.get(key).is_some_and(|w| w.stamp == stamp)
    }

    /// Drop stale entries and ended windows from the front of the queue.
    fn expire(&mut self, now: Instant) {
        while let Some((stamp, key)) = self.queue.front() {
            match self.map.get(&**key) {
                Some(w) if w.stamp == *stamp => {
                    if now < w.ends {
                        break;
                    }
                    self.map.remove(&**key);
                }
                _ => {}
            }
            self.queue.pop_front();
        }
    }

    /// Forget the least recently used key.
    fn evict_oldest(&mut self) {
        while let Some((stamp, key)) = self.queue.pop_front() {
            if self.is_live(stamp, &key) {
                self.map.remove(&*key);
                return;
            }
        }
    }

    /// Sweep the stale entries once they outnumber the live ones.
    fn compact(&mut self) {
        if self.queue.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.queue
                .retain(|(stamp, key)| map.get(&**key).is_some_and(|w| w.stamp == *stamp));
        }
    }
}

impl RateLimiter {
    /// A limiter reading time from `clock`.
    pub fn with_clock(clock: Clock) -> Self {
        RateLimiter::with_capacity(clock, RATE_LIMIT_KEYS)
    }

    /// A limiter reading time from `clock` that tracks at most `capacity`
    /// keys (at least one).
    pub fn with_capacity(clock: Clock, capacity: usize) -> Self {
        RateLimiter {
            windows: std::sync::Mutex::new(Windows {
                map: HashMap::new(),
                queue: VecDeque::new(),
                capacity: capacity.max(1),
                stamp: 0,
            }),
            clock,
            shared: None,
        }
    }

    /// A limiter whose windows live in `store` (one atomic upsert per hit),
    /// shared by every instance on that database.
    pub fn shared(store: Store, clock: Clock) -> Self {
        RateLimiter {
            shared: Some(store),
            ..RateLimiter::with_clock(clock)
        }
    }

    /// The limiter a server on `store` uses: shared in the database when it
    /// is PostgreSQL (several instances may serve it), in memory on SQLite
    /// (one process serves a SQLite file).
    pub fn for_store(store: &Store) -> Self {
        match store.backend() {
            zm_store::Backend::Postgres => RateLimiter::shared(store.clone(), Clock::default()),
            zm_store::Backend::Sqlite => RateLimiter::default(),
        }
    }

    /// Whether the windows live in the database.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// The clock the windows are measured with.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Keys tracked now (never more than the capacity).
    #[cfg(test)]
    pub(crate) fn key_count(&self) -> usize {
        self.lock().map.len()
    }

    /// Entries in the use queue, stale ones included (tests: it stays
    /// proportional to the keys tracked).
    #[cfg(test)]
    pub(crate) fn queue_len(&self) -> usize {
        self.lock().queue.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Windows> {
        self.windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Count one request for `key`; `Err(seconds)` when over `max` in `window`.
    /// A refused request does not count, but it does keep the key in use.
    pub async fn hit(&self, key: &str, max: u32, window: Duration) -> Result<(), u64> {
        if let Some(store) = &self.shared {
            let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
            return match store
                .rate_hit(key, max, window_ms, self.clock.wall_ms())
                .await
            {
                Ok(verdict) => verdict,
                // The store logged the cause; a request that cannot be
                // counted is let through (everything it would do needs the
                // same database anyway).
                Err(_) => Ok(()),
            };
        }
        let now = self.clock.now();
        let mut guard = self.lock();
        let w = &mut *guard;
        w.expire(now);
        w.stamp += 1;
        let stamp = w.stamp;
        let key: Arc<str> = match w.map.get_key_value(key) {
            Some((k, _)) => k.clone(),
            None => {
                if w.map.len() >= w.capacity {
                    w.evict_oldest();
                }
                Arc::from(key)
            }
        };
        let entry = w.map.entry(key.clone()).or_insert(Window {
            ends: now + window,
            count: 0,
            stamp,
        });
        if now >= entry.ends {
            entry.ends = now + window;
            entry.count = 0;
        }
        entry.stamp = stamp;
        let result = if entry.count >= max {
            let left = entry.ends.saturating_duration_since(now);
            // Whole seconds, rounded up, at least one.
            let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
            Err(secs.max(1))
        } else {
            entry.count += 1;
            Ok(())
        };
        w.queue.push_back((stamp, key));
        w.compact();
        result
    }

    /// Count one request of the client at `ip` (as
    /// [`crate::request::ClientIp`] gives it) for `what` (the route, say
    /// `dashboard:login`): by its address (an IPv6 one by its /64, see
    /// [`ip_limit_key`]) and, for IPv6, by its /48 too (see
    /// [`ip_network_key`]), so that whoever holds a /48 gets one window,
    /// not one for each of its 65,536 /64s. `Err(seconds)` when the
    /// address is over `max` or the /48 over `max` × `clients` in
    /// `window` (see [`CLIENTS_PER_NETWORK`]); the /48 does not count a
    /// request its /64 refused. The one way a per-client limit counts (the OAuth routes,
    /// the dashboard's sign-in).
    pub(crate) async fn hit_client(
        &self,
        what: &str,
        ip: &str,
        max: u32,
        clients: u32,
        window: Duration,
    ) -> Result<(), u64> {
        self.hit(&format!("{what}:{}", ip_limit_key(ip)), max, window)
            .await?;
        match ip_network_key(ip) {
            Some(network) => {
                self.hit(
                    &format!("{what}:{network}"),
                    max.saturating_mul(clients),
                    window,
                )
                .await
            }
            None => Ok(()),
        }
    }
}

/// How many clients' worth of requests an IPv6 /48 gets on a route where
/// each client signs in or refreshes tokens ([`RateLimiter::hit_client`]'s
/// `clients`): one /48 may be a whole office or a
/// carrier's pool of phones, each on a /64 of its own, while one client
/// cycling through its /64s still meets a bound. Registration, which
/// stores a row per request, gives a /48 no more than a /64.
pub(crate) const CLIENTS_PER_NETWORK: u32 = 8;

/// Everything a handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The tool service every tool call goes through.
    pub tools: ToolService,
    /// The store behind it (authentication, resources, OAuth).
    pub store: Store,
    pub cfg: Arc<HttpConfig>,
    pub metrics: Arc<Metrics>,
    pub limiter: Arc<RateLimiter>,
    /// Failed sign-ins per account, shared by the OAuth sign-in page and
    /// the dashboard's.
    pub(crate) login_backoff: Arc<crate::oauth::limit::LoginBackoff>,
    /// `GET /api/openapi.json`'s body, built on first request.
    pub(crate) openapi: Arc<std::sync::OnceLock<axum::body::Bytes>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let h = |u: &str| host_of(u);
        assert_eq!(
            h("https://memory.example.com"),
            Some("memory.example.com".into())
        );
        assert_eq!(
            h("https://memory.example.com/base/"),
            Some("memory.example.com".into())
        );
        assert_eq!(h("http://127.0.0.1:8080"), Some("127.0.0.1:8080".into()));
        assert_eq!(
            h("http://localhost:8080/x?y=1"),
            Some("localhost:8080".into())
        );
        assert_eq!(h("http://localhost?x=@evil"), Some("localhost".into()));
        // IPv6 literals keep their brackets, with or without a port.
        assert_eq!(h("http://[::1]:8080"), Some("[::1]:8080".into()));
        assert_eq!(h("http://[::1]/mcp"), Some("[::1]".into()));
        assert_eq!(
            h("https://[2001:DB8::1]:9443/"),
            Some("[2001:db8::1]:9443".into())
        );
        // Userinfo is never part of the host.
        assert_eq!(
            h("https://user:pw@memory.example.com:8443/"),
            Some("memory.example.com:8443".into())
        );
        assert_eq!(h("https://user@[::1]:8080"), Some("[::1]:8080".into()));
        // The default port is what a browser omits from Host.
        assert_eq!(
            h("https://memory.example.com:443"),
            Some("memory.example.com".into())
        );
        assert_eq!(
            h("http://memory.example.com:80/"),
            Some("memory.example.com".into())
        );
        assert_eq!(
            h("HTTPS://Memory.Example.COM"),
            Some("memory.example.com".into())
        );
        for none in [
            "",
            "memory.example.com",
            "/relative",
            "mailto:a@example.com",
            "file:///etc/passwd",
        ] {
            assert_eq!(h(none), None, "{none}");
        }
    }

    #[test]
    fn origins() {
        assert_eq!(
            origin_of("https://user:pw@memory.example.com:443/a?b#c"),
            Some("https://memory.example.com".into())
        );
        assert_eq!(
            origin_of("http://[::1]:8080/x"),
            Some("http://[::1]:8080".into())
        );
        assert_eq!(
            origin_of("http://localhost:3000"),
            Some("http://localhost:3000".into())
        );
        assert_eq!(origin_of("cursor://anysphere/cb"), None);
        assert_eq!(origin_of("null"), None);
        assert_eq!(origin_of("garbage"), None);
    }

    #[test]
    fn forms_come_from_our_origin_or_the_loopback_host_they_were_sent_to() {
        let mut cfg = HttpConfig::local("http://127.0.0.1:8787");
        cfg.allowed_hosts = vec!["memory.lan:8787".into(), "zm.internal".into()];
        let ok = |origin: &str, host: Option<&str>| cfg.form_origin_ok(origin, host);
        assert!(ok("http://127.0.0.1:8787", None), "the public URL's");
        assert!(
            ok("http://localhost:8787", Some("localhost:8787")),
            "a loopback alias"
        );
        assert!(ok("http://[::1]:8787", Some("[::1]:8787")));
        assert!(
            ok("http://memory.lan:8787", Some("Memory.lan:8787")),
            "an allowed host"
        );
        assert!(
            ok("http://zm.internal:8787", Some("zm.internal:8787")),
            "an allowed host without a port, on any port"
        );
        for (origin, host) in [
            ("https://evil.example", Some("127.0.0.1:8787")),
            ("http://evil.example:8787", Some("evil.example:8787")),
            ("http://localhost:8787", Some("127.0.0.1:8787")),
            ("http://localhost:9999", Some("localhost:8787")),
            ("http://localhost:8787", None),
            ("http://memory.lan:9999", Some("memory.lan:9999")),
            ("null", Some("localhost:8787")),
        ] {
            assert!(!ok(origin, host), "{origin} to {host:?}");
        }
    }

    #[test]
    fn the_base_url_is_normalised() {
        for (base, want) in [
            (
                "HTTPS://Memory.Example.COM:443/",
                "https://memory.example.com",
            ),
            ("http://127.0.0.1:8787", "http://127.0.0.1:8787"),
            (
                "https://memory.example.com/Prefix/",
                "https://memory.example.com/Prefix",
            ),
            ("not a url/", "not a url"),
        ] {
            assert_eq!(HttpConfig::local(base).public_url, want, "{base}");
        }
    }

    #[test]
    fn cookies_are_scoped_to_the_public_urls_path() {
        for (base, under, path, secure) in [
            ("http://127.0.0.1:8787", "", "/", false),
            ("http://127.0.0.1:8787", "/oauth", "/oauth", false),
            ("https://memory.example.com", "", "/", true),
            ("HTTPS://Memory.Example.com", "", "/", true),
            ("https://memory.example.com/zm", "", "/zm", true),
            (
                "https://memory.example.com/zm/",
                "/oauth",
                "/zm/oauth",
                true,
            ),
            ("https://host.example/a/b", "", "/a/b", true),
            ("https://host.example/a;Domain=evil.example", "", "/", true),
            ("not a url", "/oauth", "/oauth", false),
            ("not a url", "", "/", false),
        ] {
            let scope = CookieScope::of(&normalise_base(base), under);
            assert_eq!(
                (scope.path.as_str(), scope.secure),
                (path, secure),
                "{base} {under}"
            );
        }
        assert_eq!(
            CookieScope::of("https://h.example/zm", "").set_cookie("c", "v", 60, "Strict"),
            "__Secure-c=v; Path=/zm; Max-Age=60; HttpOnly; SameSite=Strict; Secure"
        );
        assert_eq!(
            CookieScope::of("https://h.example", "").set_cookie("c", "v", 60, "Strict"),
            "__Host-c=v; Path=/; Max-Age=60; HttpOnly; SameSite=Strict; Secure"
        );
        assert_eq!(
            CookieScope::of("http://127.0.0.1:8787", "").set_cookie("c", "v", 0, "Lax"),
            "c=v; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"
        );
    }

    /// Behind https a cookie is read only under its prefixed name: one a
    /// neighbouring subdomain set under the plain name (which it can, with
    /// `Domain=` and a longer `Path`, so that it is sent first) is not
    /// ours; over plain http the plain name is the only one.
    #[test]
    fn a_cookie_is_read_under_the_name_its_scope_gives_it() {
        let mut h = axum::http::HeaderMap::new();
        h.insert(
            axum::http::header::COOKIE,
            "zm_session=planted; __Host-zm_session=ours; __Secure-zm_session=prefixed"
                .parse()
                .unwrap(),
        );
        let read = |base: &str| CookieScope::of(base, "").read(&h, "zm_session");
        assert_eq!(read("https://m.example").as_deref(), Some("ours"));
        assert_eq!(read("https://m.example/zm").as_deref(), Some("prefixed"));
        assert_eq!(read("http://127.0.0.1:8787").as_deref(), Some("planted"));
        let bare = axum::http::HeaderMap::new();
        assert_eq!(
            CookieScope::of("https://m.example", "").read(&bare, "zm_session"),
            None
        );
        // Two values under our name: neither is ours to pick.
        let mut twice = axum::http::HeaderMap::new();
        twice.insert(
            axum::http::header::COOKIE,
            "__Secure-zm_session=planted; __Secure-zm_session=ours"
                .parse()
                .unwrap(),
        );
        assert_eq!(
            CookieScope::of("https://m.example/zm", "").read(&twice, "zm_session"),
            None
        );
        // Over plain http, two local servers on one host share cookies:
        // the first sent (the longer path's) is read.
        let mut local = axum::http::HeaderMap::new();
        local.insert(
            axum::http::header::COOKIE,
            "zm_session=zm; zm_session=root".parse().unwrap(),
        );
        assert_eq!(
            CookieScope::of("http://127.0.0.1:8080/zm", "")
                .read(&local, "zm_session")
                .as_deref(),
            Some("zm")
        );
    }

    #[test]
    fn the_path_prefix_is_the_public_urls_path() {
        for (base, prefix) in [
            ("http://127.0.0.1:8787", ""),
            ("https://memory.example.com/", ""),
            ("https://memory.example.com/zm", "/zm"),
            ("https://memory.example.com/zm/", "/zm"),
            ("https://host.example/a/b", "/a/b"),
            ("https://host.example/a;Domain=evil.example", ""),
            ("https://host.example//evil.example", ""),
            ("not a url", ""),
        ] {
            assert_eq!(
                PathPrefix::of(&normalise_base(base)).as_str(),
                prefix,
                "{base}"
            );
        }
        let zm = PathPrefix::of("https://host.example/zm");
        assert_eq!(zm.join("/"), "/zm/");
        assert_eq!(zm.join("/memories/x?y=1"), "/zm/memories/x?y=1");
        assert_eq!(zm.strip("/zm"), Some("/"));
        assert_eq!(zm.strip("/zm/"), Some("/"));
        assert_eq!(zm.strip("/zm/memories/x?y=1"), Some("/memories/x?y=1"));
        for other in [
            "/",
            "/zmx",
            "/other/zm",
            "zm/x",
            "/zm?x",
            "https://evil/zm/",
        ] {
            assert_eq!(zm.strip(other), None, "{other}");
        }
        let root = PathPrefix::default();
        assert_eq!(root.join("/login?next=%2F"), "/login?next=%2F");
        assert_eq!(root.strip("/memories/x"), Some("/memories/x"));
        assert_eq!(root.strip("memories"), None);
    }

    #[test]
    fn a_prefixed_public_url_accepts_its_own_forms() {
        // Browsers send the origin, never the path: the prefix changes
        // nothing about which forms are ours.
        let cfg = HttpConfig::local("https://memory.example.com/zm");
        assert!(cfg.form_origin_ok("https://memory.example.com", Some("memory.example.com")));
        assert!(cfg.form_origin_ok("https://memory.example.com", None));
        assert!(!cfg.form_origin_ok("https://evil.example", Some("memory.example.com")));
    }

    #[test]
    fn config_hosts_include_the_public_url() {
        let cfg = HttpConfig::local("https://user@Memory.Example.com:8443/");
        assert!(cfg.hosts().contains(&"memory.example.com:8443".to_string()));
    }

    #[tokio::test]
    async fn windows_follow_the_clock() {
        let limiter = RateLimiter::default();
        let clock = limiter.clock().clone();
        let window = Duration::from_secs(60);
        for _ in 0..2 {
            assert_eq!(limiter.hit("k", 2, window).await, Ok(()));
        }
        assert_eq!(limiter.hit("k", 2, window).await, Err(60));
        assert_eq!(limiter.hit("other", 2, window).await, Ok(()));
        clock.advance(Duration::from_secs(45));
        assert_eq!(limiter.hit("k", 2, window).await, Err(15));
        clock.advance(Duration::from_secs(15));
        assert_eq!(limiter.hit("k", 2, window).await, Ok(()));
        assert_eq!(limiter.hit("k", 2, window).await, Ok(()));
        assert_eq!(limiter.hit("k", 2, window).await, Err(60));
    }

    /// The map never holds more than its capacity, however many keys come,
    /// and a key that is over its limit stays refused for its window while
    /// thousands of other keys pass through.
    #[tokio::test]
    async fn the_key_map_is_bounded_and_a_hot_key_stays_refused() {
        const CAPACITY: usize = 16;
        let limiter = RateLimiter::with_capacity(Clock::default(), CAPACITY);
        let clock = limiter.clock().clone();
        let window = Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(limiter.hit("hot", 3, window).await, Ok(()));
        }
        assert_eq!(limiter.hit("hot", 3, window).await, Err(60));
        for i in 0..10_000 {
            assert_eq!(limiter.hit(&format!("k{i}"), 3, window).await, Ok(()));
            if i % 7 == 0 {
                // The abuser keeps hammering its own key: still refused.
                assert!(limiter.hit("hot", 3, window).await.is_err(), "at {i}");
            }
            assert!(limiter.key_count() <= CAPACITY);
            assert!(limiter.queue_len() <= 2 * CAPACITY + 65, "at {i}");
        }
        assert_eq!(limiter.key_count(), CAPACITY);
        clock.advance(Duration::from_secs(30));
        assert_eq!(limiter.hit("hot", 3, window).await, Err(30));
        // Its window ends when it says: then a whole new budget.
        clock.advance(Duration::from_secs(30));
        assert_eq!(limiter.hit("hot", 3, window).await, Ok(()));
        // Ended windows are dropped as time passes.
        clock.advance(Duration::from_secs(61));
        assert_eq!(limiter.hit("fresh", 3, window).await, Ok(()));
        assert_eq!(limiter.key_count(), 1);
    }

    /// A full map forgets its least recently used key, which only gives that
    /// key a fresh window: never a refusal for anyone else.
    #[tokio::test]
    async fn a_full_map_forgets_the_least_recently_used_key() {
        let limiter = RateLimiter::with_capacity(Clock::default(), 2);
        let window = Duration::from_secs(60);
        assert_eq!(limiter.hit("a", 1, window).await, Ok(()));
        assert_eq!(limiter.hit("b", 1, window).await, Ok(()));
        assert!(
            limiter.hit("a", 1, window).await.is_err(),
            "a is now newer than b"
        );
        assert_eq!(limiter.hit("c", 1, window).await, Ok(()), "b is forgotten");
        assert!(
            limiter.hit("a", 1, window).await.is_err(),
            "a is remembered"
        );
        assert_eq!(limiter.hit("b", 1, window).await, Ok(()), "b starts afresh");
        assert_eq!(limiter.key_count(), 2);
    }

    /// A client counts by its address (an IPv6 one by its /64) and, for
    /// IPv6, by its /48: another /64 of one allocation shares the
    /// allocation's window; another allocation, or an IPv4 address, has
    /// its own.
    #[tokio::test]
    async fn a_client_counts_by_its_64_and_by_its_48() {
        let limiter = RateLimiter::with_capacity(Clock::default(), 100);
        let window = Duration::from_secs(60);
        // Two a client, four a /48.
        let hit = |ip: &'static str| limiter.hit_client("test", ip, 2, 2, window);
        assert_eq!(hit("2001:db8:1:2::1").await, Ok(()));
        assert_eq!(hit("2001:db8:1:2::2").await, Ok(()), "the same /64");
        assert!(hit("2001:db8:1:2::3").await.is_err(), "the /64's third");
        assert_eq!(hit("2001:db8:1:3::1").await, Ok(()));
        assert_eq!(hit("2001:db8:1:3::2").await, Ok(()));
        assert!(
            hit("2001:db8:1:4::1").await.is_err(),
            "a fifth request of the /48"
        );
        assert_eq!(hit("2001:db8:2::1").await, Ok(()), "another /48");
        for _ in 0..2 {
            assert_eq!(hit("203.0.113.1").await, Ok(()));
        }
        assert!(hit("203.0.113.1").await.is_err());
        assert_eq!(hit("::ffff:203.0.113.2").await, Ok(()), "mapped IPv4");
    }

    /// Scrapes read the database's gauges one at a time: one that asked
    /// while another read is reading is served a reading begun after it
    /// asked (the next one's, shared by everyone who waited), never the
    /// one in progress when it asked.
    #[tokio::test]
    async fn scrapes_read_the_database_one_at_a_time() {
        use std::sync::atomic::AtomicUsize;
        let metrics = Arc::new(Metrics::default());
        let reads = Arc::new(AtomicUsize::new(0));
        let (release, held) = tokio::sync::oneshot::channel::<()>();
        let read = |n: Arc<AtomicUsize>| async move {
            format!("reading {}", n.fetch_add(1, Ordering::SeqCst) + 1)
        };
        // The first scrape's reading waits until released.
        let first = {
            let (metrics, reads) = (metrics.clone(), reads.clone());
            tokio::spawn(async move {
                metrics
                    .db_gauges(Instant::now(), async move {
                        let _ = held.await;
                        read(reads).await
                    })
                    .await
            })
        };
        while metrics.db_gauges.try_lock().is_ok() {
            tokio::task::yield_now().await;
        }
        // Two more ask while it reads, and wait.
        let later: Vec<_> = (0..2)
            .map(|_| {
                let (metrics, reads) = (metrics.clone(), reads.clone());
                let asked = Instant::now();
                tokio::spawn(async move { metrics.db_gauges(asked, read(reads)).await })
            })
            .collect();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            reads.load(Ordering::SeqCst),
            0,
            "nothing read beside the first"
        );
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap(), "reading 1");
        let mut answers = Vec::new();
        for l in later {
            answers.push(l.await.unwrap());
        }
        assert_eq!(answers, ["reading 2", "reading 2"], "one reading for both");
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        // A scrape that asks now is not served what was read before.
        let fresh = metrics.db_gauges(Instant::now(), read(reads.clone())).await;
        assert_eq!(fresh, "reading 3");
    }
}
