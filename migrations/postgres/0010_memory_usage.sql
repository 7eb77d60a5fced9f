-- zero-memory schema v10 (PostgreSQL): how often each memory was recalled.
--
-- Usage statistics, not memory data: `recall` notes its hits in memory and
-- the store adds them here in one transaction at most every 30 seconds (and
-- at shutdown), so a read never takes the write lock itself. The one table
-- besides `audit_log` that the "a read tool writes nothing" fingerprint
-- leaves out. A memory without a row was never recalled.
CREATE TABLE memory_usage (
    memory_id TEXT PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE,
    recalls BIGINT NOT NULL,
    last_recalled_at BIGINT NOT NULL
);
