-- zero-memory schema v26: a memory kept private in a project a team reads
-- is marked so.
--
-- Sharing a project with a team publishes its sharer's private memories
-- there, but not one they kept private on purpose while a team read the
-- project (an import, a new version of a private memory). Whether the
-- project was shared before was read from its current shares: once every
-- share had ended (unshared, its sharer gone, the team deleted), sharing
-- it again published those too. The mark is the memory's own now.
-- Backfill: a private memory in a project shared today was kept private
-- on purpose (the first share published the rest); in a project shared
-- no more, none is marked (sharing it again publishes them, as before).
ALTER TABLE memories ADD COLUMN kept_private INTEGER NOT NULL DEFAULT 0;
UPDATE memories SET kept_private = 1
 WHERE visibility = 'private' AND scope IN (SELECT scope FROM team_projects);
