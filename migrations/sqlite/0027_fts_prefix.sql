-- zero-memory schema v27 (SQLite): nothing to change.
--
-- On PostgreSQL this version indexes a memory's first 200,000 characters
-- for full text (a tsvector holds at most 1 MiB of words); FTS5 here has
-- no such cap and indexes the whole memory.
SELECT 1;
