-- zero-memory schema v9 (PostgreSQL): the dashboard's sign-in sessions.
--
-- A session is a random secret in an `HttpOnly`, `SameSite=Strict` cookie;
-- only its sha256 (hex) is stored. It ends at sign-out (the row is
-- deleted), after 12 hours without use or 7 days after sign-in, and at
-- once when the account is disabled or erased: every lookup joins the
-- user and checks `disabled_at`.
CREATE TABLE web_sessions (
    id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    user_agent TEXT
);
CREATE INDEX web_sessions_user ON web_sessions(user_id);
