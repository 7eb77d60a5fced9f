-- zero-memory schema v24 (PostgreSQL): recall counts per user.
--
-- `memory_usage` counted every recall of a memory, whoever made it, so the
-- Insight page's "most recalled" of a shared memory counted teammates'
-- recalls too: their agents' activity, which the page otherwise shows to
-- nobody but its owner. A row is now one user's recalls of one memory.
-- Who made the recalls counted before was not recorded: a private
-- memory's are its owner's (nobody else could recall it); a shared one's
-- may be teammates', so they are not kept. The index on `memory_id` keeps
-- a memory's deletion (the cascade) from reading the whole table.
ALTER TABLE memory_usage ADD COLUMN user_id TEXT REFERENCES users(id) ON DELETE CASCADE;
UPDATE memory_usage u SET user_id = m.owner_id FROM memories m
    WHERE m.id = u.memory_id AND m.visibility = 'private';
DELETE FROM memory_usage WHERE user_id IS NULL;
ALTER TABLE memory_usage ALTER COLUMN user_id SET NOT NULL;
ALTER TABLE memory_usage DROP CONSTRAINT memory_usage_pkey;
ALTER TABLE memory_usage ADD PRIMARY KEY (user_id, memory_id);
CREATE INDEX memory_usage_memory ON memory_usage(memory_id);
