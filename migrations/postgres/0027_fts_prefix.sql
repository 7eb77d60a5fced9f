-- zero-memory schema v27 (PostgreSQL): the full-text column indexes a
-- memory's first 200,000 characters.
--
-- A `tsvector` holds at most 1 MiB of distinct words, and
-- `--max-text-chars` allows memories of 1 Mi characters: such a memory
-- (a base64 blob, a long log) failed to insert (`string is too long for
-- tsvector`), answered `internal`, and stopped `zero-memory copy` from
-- SQLite. 200,000 characters stay under the cap whatever the script (at
-- most 4 bytes a character); the default limit of 64 Ki characters is
-- indexed whole, as before. Recall's dense leg reads a memory's first
-- 2,000 characters in any case.
DROP INDEX IF EXISTS memories_fts;
ALTER TABLE memories DROP COLUMN fts;
ALTER TABLE memories ADD COLUMN fts tsvector
    GENERATED ALWAYS AS (
        to_tsvector('english', regexp_replace(left(content, 200000), '[!-/:-@\[-`{-~]+', ' ', 'g'))
    ) STORED;
CREATE INDEX memories_fts ON memories USING GIN (fts);
