-- zero-memory schema v21 (SQLite): a count of deleted memories.
--
-- SQLite gives a new row the largest `seq` plus one, so once the newest
-- memories are deleted (an account erased, a team purged) the next ones
-- reuse their numbers. The background embedder looks for new work above
-- the newest `seq` it has seen: a memory written under a reused number sat
-- below that mark and waited for the next whole pass (ten minutes). Every
-- deletion now counts here, and an embedder (of this process or another on
-- the same file) that sees the count change starts a whole pass at once.
-- Derived: a copy between backends leaves this row as the destination's
-- migration made it.
CREATE TABLE memory_deletions (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    count INTEGER NOT NULL
);
INSERT INTO memory_deletions (id, count) VALUES (1, 0);
CREATE TRIGGER memories_deleted_count AFTER DELETE ON memories BEGIN
    UPDATE memory_deletions SET count = count + 1 WHERE id = 1;
END;
