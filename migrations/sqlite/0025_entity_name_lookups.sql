-- zero-memory schema v25: a user's entities are found by their names
-- through an index.
--
-- A briefing reads the caller's edges between the entities its memories
-- name. Entities of one name live in several scopes (`link` names them in
-- the personal scope, a memory in its own), so the briefing finds the
-- caller's entities of those names (owner, match key) and then their
-- edges by id. `entities_owner` (owner alone) is the new index's prefix:
-- it goes.
CREATE INDEX entities_owner_key ON entities(owner_id, match_key);
DROP INDEX entities_owner;
