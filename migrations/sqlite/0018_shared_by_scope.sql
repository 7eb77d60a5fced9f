-- zero-memory schema v18: shared memories found by their scope.
--
-- What a user reads is their own memories or those shared into a scope
-- they belong to. Queries that find their rows by that alone (a page of
-- the newest, counts, an export) list the caller's member scopes
-- (`push_visible_among`); the owner's side has an index, and this is the
-- shared side's, so the two combine instead of every user's rows being
-- read. Partial: only shared memories are listed.
CREATE INDEX memories_shared_scope ON memories(scope, seq) WHERE visibility = 'shared';
