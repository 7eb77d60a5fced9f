-- zero-memory schema v7 (PostgreSQL): nothing to do. SQLite gained a
-- covering index for full-text ranking; PostgreSQL's full-text legs read
-- the heap for `ts_rank_cd` anyway, so the same index would only cost
-- writes. The version is kept in step across backends.
SELECT 1;
