-- zero-memory schema v3: thread tokens are self-contained and signed, so a
-- read (build_context) asserts a thread without writing a row. The rows of
-- session_threads go; the signing key lives in server_secrets, created once
-- when the store opens. Tokens issued before this version read as unknown
-- (fail-open: the call behaves as if no token was passed).
CREATE TABLE server_secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
DROP TABLE session_threads;
