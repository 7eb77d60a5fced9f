-- zero-memory schema v11 (SQLite): how many recalls each of a user's agents made, per week.
--
-- Usage statistics like `memory_usage` (v10): buffered in memory and added
-- here with it, at most every 30 seconds and at shutdown; left out of the
-- "a read tool writes nothing" fingerprint. `week` is the start of the
-- week (Unix ms, weeks counted from the epoch); `agent` is the MCP
-- client's name, or the transport ('rest', 'dashboard', ...) when none was
-- given. The dashboard's Insight page reads the caller's own rows only.
CREATE TABLE recall_activity (
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    agent TEXT NOT NULL,
    week INTEGER NOT NULL,
    recalls INTEGER NOT NULL,
    hits INTEGER NOT NULL,
    PRIMARY KEY (user_id, week, agent)
);
