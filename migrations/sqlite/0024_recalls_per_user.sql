-- zero-memory schema v24 (SQLite): recall counts per user.
--
-- `memory_usage` counted every recall of a memory, whoever made it, so the
-- Insight page's "most recalled" of a shared memory counted teammates'
-- recalls too: their agents' activity, which the page otherwise shows to
-- nobody but its owner. A row is now one user's recalls of one memory.
-- Who made the recalls counted before was not recorded: a private
-- memory's are its owner's (nobody else could recall it); a shared one's
-- may be teammates', so they are not kept. The index on `memory_id` keeps
-- a memory's deletion (the cascade) from reading the whole table.
CREATE TABLE memory_usage_v24 (
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    memory_id TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    recalls INTEGER NOT NULL,
    last_recalled_at INTEGER NOT NULL,
    PRIMARY KEY (user_id, memory_id)
);
INSERT INTO memory_usage_v24 (user_id, memory_id, recalls, last_recalled_at)
    SELECT m.owner_id, u.memory_id, u.recalls, u.last_recalled_at
    FROM memory_usage u JOIN memories m ON m.id = u.memory_id
    WHERE m.visibility = 'private';
DROP TABLE memory_usage;
ALTER TABLE memory_usage_v24 RENAME TO memory_usage;
CREATE INDEX memory_usage_memory ON memory_usage(memory_id);
