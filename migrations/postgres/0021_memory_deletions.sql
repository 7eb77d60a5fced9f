-- zero-memory schema v21 (PostgreSQL): nothing to change.
--
-- SQLite's v21 counts deleted memories, because SQLite reuses the `seq` of
-- the newest rows once they are deleted and the background embedder looks
-- for new work above the newest `seq` it has seen. PostgreSQL numbers
-- `seq` from a sequence, which never hands a number out twice.
SELECT 1;
