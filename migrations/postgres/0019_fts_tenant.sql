-- zero-memory schema v19 (PostgreSQL): nothing to change.
--
-- On SQLite this version gives the full-text index a column of owner and
-- scope tokens, so a small reader's full-text legs intersect with their
-- memories in the index. PostgreSQL's planner already intersects the match
-- with the owner's index and the shared memories' index (schema v18) by
-- their statistics for the caller (`scopes::Visible`, the listed form).
SELECT 1;
