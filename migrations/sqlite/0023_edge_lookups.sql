-- zero-memory schema v23: edges are found by their target and their owner
-- through an index.
--
-- `edges.dst` references `entities` with ON DELETE CASCADE, and its only
-- index was UNIQUE (src, dst, type): every entity deleted (an account's
-- erasure, a team's purge, an entity merged into another) had the
-- cascade scan the whole table for edges pointing at it, under the write
-- lock. An account's erasure also deletes its edges by owner.
CREATE INDEX edges_dst ON edges(dst);
CREATE INDEX edges_owner ON edges(owner_id);
