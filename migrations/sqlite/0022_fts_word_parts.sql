-- zero-memory schema v22 (SQLite): nothing to change.
--
-- On PostgreSQL this version makes the full-text column index the words
-- of a path, host, email address or version number, as FTS5's unicode61
-- tokenizer here always did (it cuts at every character that is not a
-- letter or a digit, like the query).
SELECT 1;
