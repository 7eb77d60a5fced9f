-- zero-memory schema v6: the state every `serve` instance on one database
-- shares, so that several instances behind a load balancer act as one.
--
-- rate_windows: fixed-window request counters of the rate limits (used when
-- the store is PostgreSQL; one SQLite process keeps them in memory). `key`
-- is the sha256 (hex) of the limiter key (route and client IP, or token
-- id), never the key itself. One atomic upsert per request; rows whose
-- window has ended are deleted.
CREATE TABLE rate_windows (
    key TEXT PRIMARY KEY,
    ends_at BIGINT NOT NULL,
    hits BIGINT NOT NULL
);
CREATE INDEX rate_windows_ends ON rate_windows (ends_at);

-- login_failures: the per-account sign-in back-off. `account` is the
-- sha256 (hex) of the normalised email (existing or not). Rows are deleted
-- on a successful sign-in and an hour after the last failure.
CREATE TABLE login_failures (
    account TEXT PRIMARY KEY,
    failures BIGINT NOT NULL,
    last_at BIGINT NOT NULL,
    until_at BIGINT NOT NULL
);
CREATE INDEX login_failures_last ON login_failures (last_at);

-- mcp_sessions: MCP-over-HTTP sessions (the 2025-11-25 era), so a request
-- with `Mcp-Session-Id` may reach any instance: the owner, the client's
-- `initialize` parameters (another instance replays the handshake from
-- them), the connection's transport session id (`ses_…`, what provenance
-- and thread conversations use), the attached project and the carried
-- thread. `touched` orders a user's sessions by last use (the per-user
-- cap ends the least recently used); `seen_at` drives idle expiry.
CREATE TABLE mcp_sessions (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    conn_id TEXT NOT NULL,
    init_params TEXT,
    attached_project TEXT,
    thread TEXT,
    opened_at BIGINT NOT NULL,
    seen_at BIGINT NOT NULL,
    touched BIGINT NOT NULL
);
CREATE INDEX mcp_sessions_user ON mcp_sessions (user_id, touched);
CREATE INDEX mcp_sessions_seen ON mcp_sessions (seen_at);
CREATE INDEX mcp_sessions_touched ON mcp_sessions (touched);
