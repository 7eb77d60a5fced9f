-- zero-memory schema v17: a team's audit events in the order they happened.
--
-- Events of one change often share a millisecond (an accepted invitation
-- and the membership it grants), and were ordered among themselves by
-- their random ids. `seq` counts a team's events: each is the team's
-- highest so far plus one (team changes take turns on the team's row).
-- Existing events are numbered by time, then id.
ALTER TABLE team_events ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
UPDATE team_events SET seq = (
    SELECT r.n FROM (
        SELECT id AS eid, ROW_NUMBER() OVER (PARTITION BY team_id ORDER BY occurred_at, id) AS n FROM team_events
    ) r WHERE r.eid = team_events.id
);
CREATE INDEX team_events_order ON team_events(team_id, seq);
