-- zero-memory schema v22 (PostgreSQL): the full-text column indexes the
-- words a query can name.
--
-- PostgreSQL's default parser keeps a file path, a host name, an email
-- address or a version number as one token (`/etc/nginx/nginx.conf`,
-- `ops@example.com`, `1.2.3`), while a query is cut into words of letters
-- and digits only (`fts::query_terms`): `recall "nginx.conf"` asked for
-- `nginx & conf` and found nothing that SQLite's FTS5, which cuts the
-- content the same way as the query, found. The column now reads the
-- content with its ASCII punctuation (`!` to `/`, `:` to `@`, `[` to `` ` ``,
-- `{` to `~`, listed by code point: `[[:punct:]]` would follow the
-- database's locale) turned into spaces, so both backends index the same
-- words.
DROP INDEX IF EXISTS memories_fts;
ALTER TABLE memories DROP COLUMN fts;
ALTER TABLE memories ADD COLUMN fts tsvector
    GENERATED ALWAYS AS (
        to_tsvector('english', regexp_replace(content, '[!-/:-@\[-`{-~]+', ' ', 'g'))
    ) STORED;
CREATE INDEX memories_fts ON memories USING GIN (fts);
